# Libraries and the daemon. px_coordlogic holds pure logic (no sockets) so
# tests link it without a running daemon; the quorum rule it uses is shared
# with the workers and lives in proto/ (px_quorum).
add_library(px_coordlogic STATIC
  ${CMAKE_CURRENT_LIST_DIR}/membership.c
  ${CMAKE_CURRENT_LIST_DIR}/mode_policy.c
  ${CMAKE_CURRENT_LIST_DIR}/job_progress.c
  ${CMAKE_CURRENT_LIST_DIR}/store.c
  ${CMAKE_CURRENT_LIST_DIR}/status.c
  ${CMAKE_CURRENT_LIST_DIR}/metrics.c
  ${CMAKE_CURRENT_LIST_DIR}/history.c)
target_include_directories(px_coordlogic PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(px_coordlogic PUBLIC px_quorum px_common)

add_library(px_coordinator STATIC
  ${CMAKE_CURRENT_LIST_DIR}/coordinator.c
  ${CMAKE_CURRENT_LIST_DIR}/auth.c
  ${CMAKE_CURRENT_LIST_DIR}/heap_trim.c
  ${CMAKE_CURRENT_LIST_DIR}/http.c
  ${CMAKE_CURRENT_LIST_DIR}/udp.c)
target_include_directories(px_coordinator PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(px_coordinator PUBLIC px_coordlogic px_events px_proto px_keys PkgConfig::ZMQ Threads::Threads)

add_executable(phalanx-coordinator ${CMAKE_CURRENT_LIST_DIR}/main.c)
target_link_libraries(phalanx-coordinator PRIVATE px_coordinator)

# The dashboard page (coordinator/dashboard.html) goes into the binary as it
# is: configure turns it into a C array (PX_DASHBOARD_HTML, status.c), and
# re-runs when the page changes.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/dashboard.html)
file(READ ${CMAKE_CURRENT_LIST_DIR}/dashboard.html px_dashboard_hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," px_dashboard_bytes "${px_dashboard_hex}")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/dashboard_html.c.tmp
     "/* Generated from coordinator/dashboard.html by coordinator.cmake: edit that file. */\n"
     "#include <stddef.h>\nconst char PX_DASHBOARD_HTML[] = {${px_dashboard_bytes} 0};\n"
     "const size_t PX_DASHBOARD_HTML_LEN = sizeof PX_DASHBOARD_HTML - 1;\n")
configure_file(${CMAKE_CURRENT_BINARY_DIR}/dashboard_html.c.tmp ${CMAKE_CURRENT_BINARY_DIR}/dashboard_html.c COPYONLY)
target_sources(px_coordlogic PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/dashboard_html.c)

# The command line's tables, a library of their own: phalanx-launch checks the
# coordinator flags it passes on with them.
add_library(px_coordinator_flags STATIC ${CMAKE_CURRENT_LIST_DIR}/coordinator_flags.c)
target_include_directories(px_coordinator_flags PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(px_coordinator_flags PUBLIC px_proto px_common px_events_spec)
target_link_libraries(phalanx-coordinator PRIVATE px_coordinator_flags)
