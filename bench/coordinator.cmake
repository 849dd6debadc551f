# coordinator_load: N simulated members heartbeating over real ZeroMQ sockets
# against a phalanx-coordinator it starts; see docs/benchmarks-coordinator.md.
add_executable(coordinator_load ${CMAKE_CURRENT_LIST_DIR}/coordinator_load.c)
target_link_libraries(coordinator_load PRIVATE px_proto PkgConfig::ZMQ m)
add_dependencies(coordinator_load phalanx-coordinator)
