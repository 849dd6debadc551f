# Fault-tolerance (chaos) tests: real coordinator, launcher and workers on
# loopback, real SIGKILL/SIGSTOP. Fixed seeds, printed on failure.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
foreach(t chaos_kills chaos_ranks sigstop coordinator_outage heal_kill job_finished)
  if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/ft/test_${t}.py)
    add_test(NAME ft_${t}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/ft/test_${t}.py $<TARGET_FILE_DIR:phalanx-launch>)
    set_tests_properties(ft_${t} PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
  endif()
endforeach()
