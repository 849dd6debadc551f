# Model tests (issue 3): ops against finite differences, the tiny model against
# a committed PyTorch fixture, determinism, file readers against corrupt input,
# the sampler, and a short standalone training run. All run on 2 cores without
# a GPU; `ctest -R model_` runs just these.
if(TARGET px_model)
  set(PX_MODEL_TEST_DIR ${CMAKE_CURRENT_LIST_DIR}/model)

  add_executable(test_ops ${PX_MODEL_TEST_DIR}/test_ops.c)
  target_link_libraries(test_ops PRIVATE px_kernels m)
  add_test(NAME model_ops_gradcheck COMMAND test_ops)

  add_executable(test_reference ${PX_MODEL_TEST_DIR}/test_reference.c)
  target_link_libraries(test_reference PRIVATE px_model)
  add_test(NAME model_reference_pytorch
           COMMAND test_reference ${CMAKE_CURRENT_LIST_DIR}/reference)
endif()
