# Fault-tolerance benchmarks (docs/benchmarks-ft.md), run by hand:
#   python3 bench/ft_overhead.py build/bin   step time, full protocol vs plain Gloo allreduce
#   python3 bench/ft_recovery.py build/bin   SIGKILL to the survivors' next committed step
#   python3 bench/ft_heal.py build/bin       heal rate vs loopback TCP bandwidth
# The scripts drive real coordinator and worker processes; the two programs
# here are their baselines: ft_plain (plain data-parallel training, no
# coordinator) and ft_tcpbw (a plain loopback TCP stream).
if(TARGET px_comm AND TARGET px_model)
  add_executable(ft_plain ft_plain.c)
  target_link_libraries(ft_plain PRIVATE px_testlib px_model px_comm px_common OpenMP::OpenMP_C)
endif()
add_executable(ft_tcpbw ft_tcpbw.c)
target_link_libraries(ft_tcpbw PRIVATE px_common)
# ft_p2p: Gloo point-to-point streaming in the heal's chunking, with and
# without its per-chunk checksums (splits the gap between a heal and TCP).
if(TARGET px_comm)
  add_executable(ft_p2p ft_p2p.c)
  target_link_libraries(ft_p2p PRIVATE px_testlib px_comm px_common)
endif()
