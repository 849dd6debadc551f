# Tests of the coordinator's event log (coordinator/events*.c): spec parsing,
# JSON helpers, the JSONL file sink, and Kafka delivery against librdkafka's
# mock cluster hosted by px-kafka-mock, read back with kcat. Bounded in time
# (each test well under a minute) for a 2-core machine.
set(PX_KAFKA_TESTS ${CMAKE_CURRENT_LIST_DIR}/kafka)

add_executable(px-kafka-mock ${PX_KAFKA_TESTS}/px_kafka_mock.c)
target_link_libraries(px-kafka-mock PRIVATE PkgConfig::RDKAFKA)

add_executable(test_events_file ${PX_KAFKA_TESTS}/test_events_file.c)
target_link_libraries(test_events_file PRIVATE px_events)
add_executable(test_events_kafka ${PX_KAFKA_TESTS}/test_events_kafka.c)
target_link_libraries(test_events_kafka PRIVATE px_events)

add_test(NAME events_json COMMAND test_events_file json)
add_test(NAME events_spec COMMAND test_events_file spec)
add_test(NAME events_file COMMAND test_events_file file)
foreach(scenario order-outage backlog delivery-error crash)
  string(REPLACE "-" "_" name ${scenario})
  add_test(NAME events_kafka_${name}
           COMMAND test_events_kafka ${scenario} $<TARGET_FILE:px-kafka-mock>)
  set_tests_properties(events_kafka_${name} PROPERTIES TIMEOUT 90 LABELS "events;kafka")
endforeach()
set_tests_properties(events_json events_spec events_file PROPERTIES TIMEOUT 30 LABELS events)

# The real coordinator and workers publishing to the mock cluster.
px_add_py_test(events_kafka_coordinator ${PX_KAFKA_TESTS}/test_coordinator_kafka.py
               $<TARGET_FILE_DIR:phalanx-coordinator>)
set_tests_properties(events_kafka_coordinator PROPERTIES TIMEOUT 120 LABELS "events;kafka")

# phalanxctl events --events kafka:BOOT/TOPIC (tools/ctl_kafka.c) against the
# real coordinator's topic: the same lines as kcat, filters, --follow and
# SIGTERM, unreachable broker, unknown topic, malformed specs.
px_add_py_test(events_kafka_phalanxctl ${PX_KAFKA_TESTS}/test_ctl_kafka.py
               $<TARGET_FILE_DIR:phalanx-coordinator>)
set_tests_properties(events_kafka_phalanxctl PROPERTIES TIMEOUT 120 LABELS "events;kafka")

# A slow disk (every fsync takes 1 s, slow_fsync.so preloaded into the real
# coordinator) must not stall the loop; SIGTERM still leaves every event synced.
add_library(px_slow_fsync SHARED ${PX_KAFKA_TESTS}/slow_fsync.c)
px_add_py_test(events_slow_disk ${PX_KAFKA_TESTS}/test_events_slow_disk.py
               $<TARGET_FILE_DIR:phalanx-coordinator> $<TARGET_FILE:px_slow_fsync>)
set_tests_properties(events_slow_disk PROPERTIES TIMEOUT 120 LABELS events)
px_add_py_test(events_kafka_slow_disk ${PX_KAFKA_TESTS}/test_events_slow_disk.py
               $<TARGET_FILE_DIR:phalanx-coordinator> $<TARGET_FILE:px_slow_fsync> kafka)
set_tests_properties(events_kafka_slow_disk PROPERTIES TIMEOUT 120 LABELS "events;kafka")

# Tiers (tests/CMakeLists.txt).
px_tier(unit events_json events_spec events_file)
px_tier(process events_kafka_backlog events_kafka_delivery_error events_kafka_coordinator events_kafka_phalanxctl
        events_slow_disk events_kafka_slow_disk)
px_tier(chaos events_kafka_order_outage events_kafka_crash)
