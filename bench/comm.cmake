# Communicator benchmarks (parallel/): run by hand, e.g.
#   build/bin/comm_allreduce            (3 ranks, 1 KiB .. 64 MiB)
# The directory store and fork helpers are shared with tests/comm/.
if(TARGET px_comm)
  add_executable(comm_allreduce comm_allreduce.c
                 ${PROJECT_SOURCE_DIR}/tests/comm/px_dir_store.c
                 ${PROJECT_SOURCE_DIR}/tests/comm/px_procs.c)
  target_include_directories(comm_allreduce PRIVATE ${PROJECT_SOURCE_DIR}/tests/comm)
  target_link_libraries(comm_allreduce PRIVATE px_comm px_common)
endif()
