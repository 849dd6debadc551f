# Worker tests: the commit vote as a table of cases (pure logic), and the
# agent against a real coordinator process on loopback (no mocks).
add_executable(test_vote ${CMAKE_CURRENT_LIST_DIR}/worker/test_vote.c)
target_link_libraries(test_vote PRIVATE px_vote)
add_test(NAME worker_vote COMMAND test_vote)

add_executable(test_agent ${CMAKE_CURRENT_LIST_DIR}/worker/test_agent.c)
target_link_libraries(test_agent PRIVATE px_agent px_common Threads::Threads)
add_test(NAME worker_agent COMMAND test_agent $<TARGET_FILE:phalanx-coordinator>)
set_tests_properties(worker_agent PROPERTIES TIMEOUT 60)

# --device refusals at start (no GPU, sharded layouts, buckets): exit 2 and
# the reason; runs without a GPU (tests/gpu.cmake has the runs on one).
px_add_py_test(worker_device_flag ${CMAKE_CURRENT_LIST_DIR}/worker/test_device_flag.py
               $<TARGET_FILE_DIR:phalanx-worker>)
set_tests_properties(worker_device_flag PROPERTIES TIMEOUT 120)

# --beta1/--beta2/--eps (defaults bit for bit the old constants) and
# --progress-format json through phalanx-launch: lines parse, full precision.
px_add_py_test(worker_train_flags ${CMAKE_CURRENT_LIST_DIR}/worker/test_train_flags.py
               $<TARGET_FILE_DIR:phalanx-worker>)
set_tests_properties(worker_train_flags PROPERTIES TIMEOUT 300)

add_executable(test_liveness ${CMAKE_CURRENT_LIST_DIR}/worker/test_liveness.c)
target_link_libraries(test_liveness PRIVATE px_agent)
add_test(NAME worker_liveness COMMAND test_liveness)

# Tiers (tests/CMakeLists.txt).
px_tier(unit worker_vote worker_liveness)
px_tier(process worker_agent worker_device_flag worker_train_flags)
