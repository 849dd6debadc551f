# px_comm tests (parallel/): real rank processes on loopback, real signals,
# every wait bounded. One binary, one ctest per scenario; all labelled "comm"
# (ctest -L comm). The whole suite takes well under a minute on 2 cores.
add_executable(comm_test comm/comm_test.c)
target_link_libraries(comm_test PRIVATE px_testlib Threads::Threads)

# The in-group mesh as tables (pure), and its axis communicators for real.
add_executable(test_mesh comm/test_mesh.c)
target_link_libraries(test_mesh PRIVATE px_mesh)
add_test(NAME comm_mesh_table COMMAND test_mesh)
set_tests_properties(comm_mesh_table PROPERTIES TIMEOUT 30 LABELS comm)
target_link_libraries(comm_test PRIVATE px_mesh)

# Low-precision averaging of DiLoCo pseudo-gradients (parallel/outer_codec.h):
# the codec as tables, then the collective with 3 real ranks over Gloo.
add_executable(test_outer_codec comm/test_outer_codec.c)
target_link_libraries(test_outer_codec PRIVATE px_outer_codec m)
add_test(NAME comm_outer_codec COMMAND test_outer_codec)
set_tests_properties(comm_outer_codec PROPERTIES TIMEOUT 60 LABELS comm)
add_executable(test_outer_allreduce comm/test_outer_allreduce.c)
target_link_libraries(test_outer_allreduce PRIVATE px_outer_codec px_testlib m)
add_test(NAME comm_outer_allreduce COMMAND test_outer_allreduce)
set_tests_properties(comm_outer_allreduce PROPERTIES TIMEOUT 240 LABELS comm)

foreach(t basic kill stop abort pace rendezvous mismatch shutdown mesh)
  add_test(NAME comm_${t} COMMAND comm_test ${t})
  set_tests_properties(comm_${t} PROPERTIES TIMEOUT 90 LABELS comm)
endforeach()

get_property(px_comm_nccl GLOBAL PROPERTY PX_COMM_NCCL)
if(px_comm_nccl)
  add_test(NAME comm_nccl COMMAND comm_test nccl)
  set_tests_properties(comm_nccl PROPERTIES TIMEOUT 60 LABELS comm)
endif()

# Memory errors and definite leaks in the shim and the Gloo paths it uses:
# the collectives (--small keeps them quick), abort from another thread,
# and the failure/poison/re-form path after a SIGKILL.
find_program(PX_VALGRIND valgrind)
if(PX_VALGRIND)
  foreach(t "basic;--small" abort kill)
    list(GET t 0 name)
    add_test(NAME comm_valgrind_${name}
             COMMAND ${PX_VALGRIND} --quiet --error-exitcode=99 --leak-check=full
                     --errors-for-leak-kinds=definite
                     --suppressions=${CMAKE_CURRENT_SOURCE_DIR}/comm/valgrind.supp
                     $<TARGET_FILE:comm_test> ${t})
    set_tests_properties(comm_valgrind_${name} PROPERTIES TIMEOUT 180 LABELS comm
                         ENVIRONMENT PX_TEST_SLOW=4)
  endforeach()
  # The outer codec's collective: no uninitialised byte (int8/bf16 padding)
  # goes on the wire, no leak of its scratch.
  add_test(NAME comm_outer_valgrind
           COMMAND ${PX_VALGRIND} --quiet --error-exitcode=99 --leak-check=full
                   --errors-for-leak-kinds=definite
                   --suppressions=${CMAKE_CURRENT_SOURCE_DIR}/comm/valgrind.supp
                   $<TARGET_FILE:test_outer_allreduce> --small)
  set_tests_properties(comm_outer_valgrind PROPERTIES TIMEOUT 300 LABELS comm)
endif()

# Tiers (tests/CMakeLists.txt).
px_tier(unit comm_mesh_table comm_outer_codec)
px_tier(process comm_outer_allreduce comm_basic comm_pace comm_rendezvous comm_mismatch comm_shutdown comm_mesh)
px_tier(chaos comm_kill comm_stop comm_abort)
if(px_comm_nccl)
  px_tier(gpu comm_nccl)
endif()
if(PX_VALGRIND)
  px_tier(process comm_valgrind_basic)
  px_tier(chaos comm_valgrind_abort comm_valgrind_kill)
  px_tier(slow comm_outer_valgrind)
endif()
