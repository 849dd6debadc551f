# Training-step benchmark (issue 3): bench_train_step times one CPU training
# step of the model; bench/train_step.sh runs it beside PyTorch on the same
# model, weights and batch. Built with the project, run by hand.
if(TARGET px_model)
  add_executable(bench_train_step ${CMAKE_CURRENT_LIST_DIR}/train_step.c)
  target_link_libraries(bench_train_step PRIVATE px_model px_common)
endif()
