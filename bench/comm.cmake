# Communicator benchmarks (parallel/): run by hand, e.g.
#   build/bin/comm_allreduce            (3 ranks, 1 KiB .. 64 MiB)
# The directory store and fork helpers come from the tests' px_testlib.
if(TARGET px_comm)
  add_executable(comm_allreduce comm_allreduce.c)
  target_link_libraries(comm_allreduce PRIVATE px_testlib px_comm px_common)
endif()
