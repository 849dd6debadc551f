# Control-plane tests: pure logic as tables, then real processes on loopback.
foreach(t quorum membership store wire)
  add_executable(test_${t} ${CMAKE_CURRENT_LIST_DIR}/control/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE px_coordlogic px_proto)
  add_test(NAME control_${t} COMMAND test_${t})
endforeach()

find_package(Python3 REQUIRED COMPONENTS Interpreter)
foreach(t integration coordinator_restart cli auth)
  add_test(NAME control_${t}
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/control/test_${t}.py
                   $<TARGET_FILE_DIR:phalanx-coordinator>)
  set_tests_properties(control_${t} PROPERTIES TIMEOUT 120)
endforeach()
