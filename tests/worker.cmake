# Worker tests: the commit vote as a table of cases (pure logic), and the
# agent against a real coordinator process on loopback (no mocks).
add_executable(test_vote ${CMAKE_CURRENT_LIST_DIR}/worker/test_vote.c)
target_link_libraries(test_vote PRIVATE px_vote)
add_test(NAME worker_vote COMMAND test_vote)

add_executable(test_agent ${CMAKE_CURRENT_LIST_DIR}/worker/test_agent.c)
target_link_libraries(test_agent PRIVATE px_agent px_common Threads::Threads)
add_test(NAME worker_agent COMMAND test_agent $<TARGET_FILE:phalanx-coordinator>)
set_tests_properties(worker_agent PROPERTIES TIMEOUT 60)
