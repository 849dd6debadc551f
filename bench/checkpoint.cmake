# Checkpoint benchmark (docs/benchmarks.md, "Checkpoints"), run by hand:
#   python3 bench/checkpoint.py build/bin   save vs dd, restore vs cat, step-time overhead of saving
# bench_ckpt_save is its driver: it times px_ckpt_write and px_ckpt_load.
add_executable(bench_ckpt_save ${CMAKE_CURRENT_LIST_DIR}/ckpt_save.c)
target_link_libraries(bench_ckpt_save PRIVATE px_checkpoint)
