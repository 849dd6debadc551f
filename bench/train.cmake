# Training-step benchmark: bench_train_step times one CPU training
# step of the model; bench/train_step.sh runs it beside PyTorch on the same
# model, weights and batch. bench_recompute compares a step with and without
# block activation recomputation. Built with the project, run by hand.
if(TARGET px_model)
  add_executable(bench_train_step ${CMAKE_CURRENT_LIST_DIR}/train_step.c)
  target_link_libraries(bench_train_step PRIVATE px_model px_common)
  # Block activation recomputation: activation bytes and step time, off vs on.
  add_executable(bench_recompute ${CMAKE_CURRENT_LIST_DIR}/recompute.c)
  target_link_libraries(bench_recompute PRIVATE px_model px_common)
endif()
