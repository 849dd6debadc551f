# Libraries and the daemon. px_coordlogic holds pure logic (no sockets) so
# tests link it without a running daemon; the quorum rule it uses is shared
# with the workers and lives in proto/ (px_quorum).
add_library(px_coordlogic STATIC
  ${CMAKE_CURRENT_LIST_DIR}/membership.c
  ${CMAKE_CURRENT_LIST_DIR}/mode_policy.c
  ${CMAKE_CURRENT_LIST_DIR}/store.c
  ${CMAKE_CURRENT_LIST_DIR}/status.c
  ${CMAKE_CURRENT_LIST_DIR}/history.c)
target_include_directories(px_coordlogic PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(px_coordlogic PUBLIC px_quorum px_common)

add_library(px_coordinator STATIC
  ${CMAKE_CURRENT_LIST_DIR}/coordinator.c
  ${CMAKE_CURRENT_LIST_DIR}/auth.c
  ${CMAKE_CURRENT_LIST_DIR}/http.c)
target_include_directories(px_coordinator PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(px_coordinator PUBLIC px_coordlogic px_events px_proto px_keys PkgConfig::ZMQ Threads::Threads)

add_executable(phalanx-coordinator ${CMAKE_CURRENT_LIST_DIR}/main.c)
target_link_libraries(phalanx-coordinator PRIVATE px_coordinator)
