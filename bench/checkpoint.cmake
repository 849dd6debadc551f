# bench/checkpoint.sh's driver: times px_ckpt_write and px_ckpt_load.
add_executable(bench_ckpt_save ${CMAKE_CURRENT_LIST_DIR}/ckpt_save.c)
target_link_libraries(bench_ckpt_save PRIVATE px_checkpoint)
