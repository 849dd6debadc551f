# Control-plane tests: pure logic as tables, then real processes on loopback.
foreach(t quorum membership store wire ratelimit map mode_policy history job_progress metrics)
  add_executable(test_${t} ${CMAKE_CURRENT_LIST_DIR}/control/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE px_coordlogic px_proto)
  target_include_directories(test_${t} PRIVATE ${CMAKE_CURRENT_LIST_DIR}/lib)
  add_test(NAME control_${t} COMMAND test_${t})
endforeach()

# phalanxctl events' line for people, as a table.
add_executable(test_event_line ${CMAKE_CURRENT_LIST_DIR}/control/test_event_line.c)
target_link_libraries(test_event_line PRIVATE px_ctl_event_line)
add_test(NAME control_event_line COMMAND test_event_line)

# The heap trimmer's rule, and its thread started and stopped.
add_executable(test_heap_trim ${CMAKE_CURRENT_LIST_DIR}/control/test_heap_trim.c)
target_link_libraries(test_heap_trim PRIVATE px_coordinator)
add_test(NAME control_heap_trim COMMAND test_heap_trim)

# The flag tables' parser (common/px_flags.h): values, ranges, the
# environment, unknown flags, --help.
add_executable(test_flags ${CMAKE_CURRENT_LIST_DIR}/control/test_flags.c)
target_link_libraries(test_flags PRIVATE px_common)
add_test(NAME control_flags COMMAND test_flags)

foreach(t integration coordinator_restart cli auth connect_timeout env_flags)
  px_add_py_test(control_${t} ${CMAKE_CURRENT_LIST_DIR}/control/test_${t}.py $<TARGET_FILE_DIR:phalanx-coordinator>)
  set_tests_properties(control_${t} PROPERTIES TIMEOUT 120)
endforeach()

# --mode auto: a real coordinator switches to DiLoCo on a group loss (and
# back once the window passed) and on a high comm share from fake workers.
px_add_py_scenarios(control_mode_auto ${CMAKE_CURRENT_LIST_DIR}/control/test_mode_auto.py
                    $<TARGET_FILE_DIR:phalanx-coordinator> 120 failures comm)

# Protocol robustness: a raw ZeroMQ DEALER (fuzz_client) throws malformed and
# seeded random frames at a live coordinator; test_fuzz.py adds HTTP and raw
# TCP abuse and checks the coordinator still serves /status, counts every bad
# frame and lets a real worker join a quorum. PHALANX_FUZZ_SEED reproduces a run.
add_executable(fuzz_client ${CMAKE_CURRENT_LIST_DIR}/control/fuzz_client.c)
target_link_libraries(fuzz_client PRIVATE px_proto PkgConfig::ZMQ)
px_add_py_test(control_fuzz ${CMAKE_CURRENT_LIST_DIR}/control/test_fuzz.py $<TARGET_FILE_DIR:phalanx-coordinator>)
set_tests_properties(control_fuzz PROPERTIES TIMEOUT 120)
# Free-text fields (a register's host) full of JSON/HTML metacharacters and
# invalid UTF-8 must leave /status, the dashboard and the event log well formed.
add_test(NAME control_fuzz_hostile_strings
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/control/test_fuzz.py
                 $<TARGET_FILE_DIR:phalanx-coordinator> hostile)
set_tests_properties(control_fuzz_hostile_strings PROPERTIES TIMEOUT 60)
# A flood of bad frames must not starve /status, loss detection or SIGTERM;
# a heartbeat in flight when a member dies must not hide its closed connection;
# a member reconnecting on its old descriptor number must not stay "closed".
# A heartbeat that says "draining" drains its group (a restarted coordinator).
foreach(t flood race reconnect drain)
  set(name control_fuzz_${t})
  if(t STREQUAL "race")
    set(name control_fuzz_disconnect_race)
  endif()
  add_test(NAME ${name}
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/control/test_fuzz.py
                   $<TARGET_FILE_DIR:phalanx-coordinator> ${t})
  set_tests_properties(${name} PROPERTIES TIMEOUT 90)
endforeach()

# Hostile peers that speak the protocol but lie (rogue_client): impersonation,
# forged run_finished, stale accusations, a quorum member that never trains.
add_executable(rogue_client ${CMAKE_CURRENT_LIST_DIR}/control/rogue_client.c)
target_link_libraries(rogue_client PRIVATE px_proto PkgConfig::ZMQ)
px_add_py_scenarios(control_hostile ${CMAKE_CURRENT_LIST_DIR}/control/test_hostile.py
                    $<TARGET_FILE_DIR:phalanx-coordinator> 120
                    impersonation forged_finish stale_report stalled_member auth_flood late_adoption)
# Heartbeats as sealed UDP datagrams: real workers, a rogue holding a key
# (udp_rogue: replays, forgeries, malformed datagrams), blocked UDP paths.
add_executable(udp_rogue ${CMAKE_CURRENT_LIST_DIR}/control/udp_rogue.c)
target_link_libraries(udp_rogue PRIVATE px_proto PkgConfig::ZMQ)
px_add_py_scenarios(control_udp_heartbeats ${CMAKE_CURRENT_LIST_DIR}/control/test_udp_heartbeats.py
                    $<TARGET_FILE_DIR:phalanx-coordinator> 90 workers forged blocked dead frozen burst)
# CURVE and the bind policy: the authorized-keys parser, token comparison,
# loopback classification and key files as tables (test_auth_keys.c); real
# coordinators, workers and phalanxctl with keys (test_curve.py).
add_executable(test_auth_keys ${CMAKE_CURRENT_LIST_DIR}/control/test_auth_keys.c)
target_link_libraries(test_auth_keys PRIVATE px_coordinator)
add_test(NAME control_auth_keys COMMAND test_auth_keys)
add_executable(test_zap ${CMAKE_CURRENT_LIST_DIR}/control/test_zap.c)
target_link_libraries(test_zap PRIVATE px_coordinator)
add_test(NAME control_zap COMMAND test_zap)
set_tests_properties(control_zap PROPERTIES TIMEOUT 60)
px_add_py_test(control_curve ${CMAKE_CURRENT_LIST_DIR}/control/test_curve.py $<TARGET_FILE_DIR:phalanx-coordinator>)
set_tests_properties(control_curve PROPERTIES TIMEOUT 300)
# Hostile HTTP clients: slowloris half-open connections must not lock fresh
# requests out, and clients that never read their (large) answers must not
# delay anyone (coordinator/http.c). register_members makes /status large.
add_executable(register_members ${CMAKE_CURRENT_LIST_DIR}/control/register_members.c)
target_link_libraries(register_members PRIVATE px_proto PkgConfig::ZMQ)
px_add_py_scenarios(control_http ${CMAKE_CURRENT_LIST_DIR}/control/test_http_abuse.py
                    $<TARGET_FILE_DIR:phalanx-coordinator> 120 slowloris lazy-readers)
# The HTTP server alone (status lines, deadlines, slot eviction, lazy readers).
add_executable(test_http ${CMAKE_CURRENT_LIST_DIR}/control/test_http.c)
target_link_libraries(test_http PRIVATE px_coordinator)
add_test(NAME control_http COMMAND test_http)
set_tests_properties(control_http PROPERTIES TIMEOUT 60)
# Bounded state: 2,000 members churning for a minute plus store floods; the
# coordinator's memory stays bounded and flat, /status keeps answering, every
# limit refuses with RESOURCE_LIMIT, a metric and rate-limited events.
# PHALANX_CHURN_S shortens the churn for a quick run.
px_add_py_test(control_limits ${CMAKE_CURRENT_LIST_DIR}/control/test_limits.py $<TARGET_FILE_DIR:phalanx-coordinator>)
set_tests_properties(control_limits PROPERTIES TIMEOUT 180)
# RSS under register/leave churn: 1,000 members, 500 replaced a second for a
# minute; RSS after a warm-up stays on its plateau (coordinator/heap_trim.c).
# PHALANX_CHURN_S, PHALANX_CHURN_WARMUP_S, PHALANX_CHURN_PER_S and
# PHALANX_CHURN_MEMBERS make it the ten-minute measurement
# (docs/benchmarks-coordinator.md).
px_add_py_test(control_churn_rss ${CMAKE_CURRENT_LIST_DIR}/control/test_churn_rss.py $<TARGET_FILE_DIR:phalanx-coordinator>)
set_tests_properties(control_churn_rss PROPERTIES TIMEOUT 240 RESOURCE_LOCK cores)
# phalanxctl's operator commands against real processes: kill's host and
# process checks, events with filters and --follow, drain as a planned leave,
# plot from a short real run (skips without matplotlib).
px_add_py_scenarios(control_phalanxctl ${CMAKE_CURRENT_LIST_DIR}/control/test_phalanxctl.py
                    $<TARGET_FILE_DIR:phalanx-coordinator> 300 kill_events drain drain_layouts drain_frozen plot)
set_tests_properties(control_phalanxctl_plot PROPERTIES SKIP_RETURN_CODE 77) # no matplotlib

# Input checked before anything connects or joins: impossible endpoints in
# every program, the coordinator's configuration (exit 2; a port in use: 1),
# workers that cannot train never registering.
px_add_py_scenarios(control_validate ${CMAKE_CURRENT_LIST_DIR}/control/test_validate.py
                    $<TARGET_FILE_DIR:phalanx-coordinator> 120 endpoints coordinator worker)

# Prometheus and Grafana: the alert rules (deploy/prometheus) checked and
# unit-tested with promtool (tests/control/phalanx_alerts_test.yaml), the
# dashboard (deploy/grafana) and the rules against a live job's /metrics,
# which passes `promtool check metrics`, then a Prometheus server scraping it
# as deploy/prometheus/README.md says and running every query and rule.
# Skipped (77) without promtool (Debian prometheus, scripts/install-deps.sh).
px_add_py_test(control_metrics_rules ${CMAKE_CURRENT_LIST_DIR}/control/test_metrics_rules.py
               $<TARGET_FILE_DIR:phalanx-coordinator>)
set_tests_properties(control_metrics_rules PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77)

# A quorum of 3,000 groups: its quorum_formed event is cut to fit, not dropped.
px_add_py_test(control_large_quorum ${CMAKE_CURRENT_LIST_DIR}/control/test_large_quorum.py $<TARGET_FILE_DIR:phalanx-coordinator>)
set_tests_properties(control_large_quorum PROPERTIES TIMEOUT 180 RESOURCE_LOCK cores)

# Tiers (tests/CMakeLists.txt).
px_tier(unit control_quorum control_membership control_store control_wire control_ratelimit control_map control_heap_trim
        control_mode_policy control_history control_job_progress control_metrics control_event_line control_flags
        control_auth_keys control_zap control_http)
px_tier(process control_integration control_cli control_auth control_env_flags control_mode_auto_comm control_fuzz
        control_fuzz_hostile_strings control_fuzz_flood control_fuzz_disconnect_race control_fuzz_reconnect
        control_fuzz_drain control_hostile_impersonation control_hostile_forged_finish control_hostile_stale_report
        control_hostile_stalled_member control_hostile_auth_flood control_hostile_late_adoption
        control_udp_heartbeats_workers control_udp_heartbeats_forged control_curve control_http_slowloris
        control_http_lazy_readers control_phalanxctl_drain control_phalanxctl_plot control_validate_endpoints
        control_validate_coordinator control_validate_worker control_metrics_rules)
px_tier(chaos control_coordinator_restart control_udp_heartbeats_blocked control_udp_heartbeats_dead
        control_udp_heartbeats_frozen control_udp_heartbeats_burst control_phalanxctl_kill_events
        control_phalanxctl_drain_frozen)
px_tier(slow control_limits control_churn_rss control_connect_timeout control_mode_auto_failures
        control_phalanxctl_drain_layouts control_large_quorum)
