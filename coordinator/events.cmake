# px_events: the coordinator's event log (JSONL file or Kafka with a spill
# file). A library of its own so tests/kafka drives it without a coordinator.
# See coordinator/events.h for the API and docs/events.md for the schema.
# The --events spec parser it builds on is common/px_events_spec.

add_library(px_events STATIC
  ${CMAKE_CURRENT_LIST_DIR}/events.c
  ${CMAKE_CURRENT_LIST_DIR}/events_file.c
  ${CMAKE_CURRENT_LIST_DIR}/events_sync.c
  ${CMAKE_CURRENT_LIST_DIR}/events_json.c
  ${CMAKE_CURRENT_LIST_DIR}/events_kafka.c)
target_include_directories(px_events PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(px_events PUBLIC px_events_spec px_common PkgConfig::RDKAFKA Threads::Threads)
