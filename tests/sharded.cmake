# Sharded replica groups (FSDP, TP, HSDP across groups): real coordinator and
# workers on loopback, compared against one rank holding the whole model.
px_add_py_scenarios(sharded ${CMAKE_CURRENT_LIST_DIR}/sharded/test_layouts.py ${CMAKE_BINARY_DIR}/bin 600 layouts flags mismatch)
px_add_py_scenarios(sharded ${CMAKE_CURRENT_LIST_DIR}/sharded/test_sharded_kill.py ${CMAKE_BINARY_DIR}/bin 600 kill stop)
foreach(t layouts kill stop) # flags and mismatch: refusals, nothing trains long
  set_tests_properties(sharded_${t} PROPERTIES RESOURCE_LOCK cores)
endforeach()

# The drawn initial shard against the whole model's cut (pure, no sockets).
add_executable(test_shard_init ${CMAKE_CURRENT_LIST_DIR}/sharded/test_shard_init.c)
target_link_libraries(test_shard_init PRIVATE px_sharded px_checkpoint px_model)
add_test(NAME sharded_init COMMAND test_shard_init)

# A shard computing in a memory of its own (the GPU's path, with host
# operations): 4 rank processes, Gloo, equal to the default bit for bit.
add_executable(test_shard_memory ${CMAKE_CURRENT_LIST_DIR}/sharded/test_shard_memory.c)
target_link_libraries(test_shard_memory PRIVATE px_sharded px_testlib px_model m)
add_test(NAME sharded_memory COMMAND test_shard_memory)
set_tests_properties(sharded_memory PROPERTIES TIMEOUT 180)

# Checkpoints written in parts by a sharded group and restored into other layouts;
# a rank of the writing group killed while the parts are written.
px_add_py_test(sharded_checkpoint ${CMAKE_CURRENT_LIST_DIR}/sharded/test_sharded_ckpt.py ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(sharded_checkpoint PROPERTIES TIMEOUT 600 RESOURCE_LOCK cores)
px_add_py_test(sharded_part_kill ${CMAKE_CURRENT_LIST_DIR}/sharded/test_part_kill.py ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(sharded_part_kill PROPERTIES TIMEOUT 600 RESOURCE_LOCK cores)

# Pipeline schedules as tables: every kind for P 1..8 and M 1..32 checked,
# measured against the theory, and broken schedules rejected (pure).
add_executable(test_schedule ${CMAKE_CURRENT_LIST_DIR}/sharded/test_schedule.c)
target_link_libraries(test_schedule PRIVATE px_schedule m)
add_test(NAME pp_schedule_table COMMAND test_schedule)

# phalanx-worker --print-schedule: the timelines, the defaults, bad values.
px_add_py_test(pp_print_schedule ${CMAKE_CURRENT_LIST_DIR}/sharded/test_print_schedule.py
               $<TARGET_FILE_DIR:phalanx-worker>)
set_tests_properties(pp_print_schedule PROPERTIES TIMEOUT 60)

# Pipelined groups (--pp, with --tp and --fsdp): the same losses as one rank
# under each schedule, a refused layout, a killed stage healed, and
# checkpoints moved into and out of pipelined layouts.
px_add_py_scenarios(pipeline ${CMAKE_CURRENT_LIST_DIR}/sharded/test_pipeline.py ${CMAKE_BINARY_DIR}/bin 600 layouts refused kill stop checkpoint)
foreach(t layouts kill stop checkpoint)
  set_tests_properties(pipeline_${t} PROPERTIES RESOURCE_LOCK cores)
endforeach()

# Tiers (tests/CMakeLists.txt).
px_tier(unit sharded_init pp_schedule_table)
px_tier(process sharded_flags sharded_mismatch sharded_memory sharded_checkpoint pp_print_schedule pipeline_refused
        pipeline_checkpoint)
px_tier(chaos sharded_kill sharded_stop pipeline_kill pipeline_stop)
px_tier(slow sharded_layouts sharded_part_kill pipeline_layouts)
