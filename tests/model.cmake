# Model tests: ops against finite differences, the tiny model against
# a committed PyTorch fixture, determinism, file readers against corrupt input,
# the sampler, and a short standalone training run. All run on 2 cores without
# a GPU; `ctest -R model_` runs just these.
set(PX_MODEL_TEST_DIR ${CMAKE_CURRENT_LIST_DIR}/model)

add_executable(test_ops ${PX_MODEL_TEST_DIR}/test_ops.c)
target_link_libraries(test_ops PRIVATE px_kernels m)
add_test(NAME model_ops_gradcheck COMMAND test_ops)

# The AVX-512/AVX2/baseline clones of the element loops must agree bit for bit.
add_executable(ops_hash ${PX_MODEL_TEST_DIR}/ops_hash.c)
target_link_libraries(ops_hash PRIVATE px_kernels)
add_executable(ops_hash_baseline ${PX_MODEL_TEST_DIR}/ops_hash.c ${CMAKE_SOURCE_DIR}/kernels/ops_cpu.c)
target_compile_definitions(ops_hash_baseline PRIVATE PX_NO_CLONES=1)
target_compile_options(ops_hash_baseline PRIVATE -O3 -fno-math-errno -fno-trapping-math)
target_include_directories(ops_hash_baseline PRIVATE ${CMAKE_SOURCE_DIR}/kernels)
target_link_libraries(ops_hash_baseline PRIVATE OpenMP::OpenMP_C PkgConfig::OPENBLAS Threads::Threads m)
add_test(NAME model_ops_isa_clones
         COMMAND sh -c "a=$(\"$1\") && b=$(\"$2\") && echo \"dispatched $a baseline $b\" && [ \"$a\" = \"$b\" ]"
                 sh $<TARGET_FILE:ops_hash> $<TARGET_FILE:ops_hash_baseline>)

add_executable(test_reference ${PX_MODEL_TEST_DIR}/test_reference.c)
target_link_libraries(test_reference PRIVATE px_model)
add_test(NAME model_reference_pytorch
         COMMAND test_reference ${CMAKE_CURRENT_LIST_DIR}/reference)

add_executable(test_train_state ${PX_MODEL_TEST_DIR}/test_train_state.c)
target_include_directories(test_train_state PRIVATE ${CMAKE_CURRENT_LIST_DIR}/lib)
target_link_libraries(test_train_state PRIVATE px_model)
add_test(NAME model_train_state COMMAND test_train_state)

add_executable(test_gpt ${PX_MODEL_TEST_DIR}/test_gpt.c)
target_link_libraries(test_gpt PRIVATE px_model px_common)
add_test(NAME model_gpt_determinism COMMAND test_gpt)

add_executable(test_files ${PX_MODEL_TEST_DIR}/test_files.c)
target_link_libraries(test_files PRIVATE px_model)
add_test(NAME model_files_corrupt COMMAND test_files WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})

add_executable(test_sample ${PX_MODEL_TEST_DIR}/test_sample.c)
target_link_libraries(test_sample PRIVATE px_model px_testlib)
add_test(NAME model_sample COMMAND test_sample)

add_executable(test_data ${PX_MODEL_TEST_DIR}/test_data.c)
target_link_libraries(test_data PRIVATE px_model)
add_test(NAME model_data_sampler COMMAND test_data WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})

# phalanx-data's inputs (folders, gzip, JSON Lines, stdin) and split, checked
# token for token; bad input exits 2 naming it.
px_add_py_test(model_phalanx_data ${PX_MODEL_TEST_DIR}/test_phalanx_data.py ${CMAKE_BINARY_DIR}/bin)

# phalanx-sample on a model trained here: its text, seeds, checkpoints.
px_add_py_test(model_phalanx_sample ${PX_MODEL_TEST_DIR}/test_phalanx_sample.py ${CMAKE_BINARY_DIR}/bin)

# A model from a JSON config (odd sizes) through every layout, chaos with
# checkpoints, and a vocabulary that follows the data's tokenizer.
px_add_py_scenarios(model_config ${PX_MODEL_TEST_DIR}/test_model_config.py ${CMAKE_BINARY_DIR}/bin 600 layouts chaos
                    vocab)

add_test(NAME model_standalone_train
         COMMAND sh ${PX_MODEL_TEST_DIR}/standalone_train.sh $<TARGET_FILE_DIR:phalanx-worker>
                 ${CMAKE_CURRENT_BINARY_DIR}/standalone_train)

# --recompute block trains a short job (a whole replica, fsdp 2 x tp 2, and
# pp 2 under zb-h1) to the same per-step losses and final checksum as without it.
px_add_py_test(model_recompute_job ${PX_MODEL_TEST_DIR}/test_recompute_job.py ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(model_recompute_job PROPERTIES TIMEOUT 600 RESOURCE_LOCK cores)

# docs/training.md's walkthrough, its shell block run as written: text to a
# tokenizer and shards, a job under chaos with samples, a sample from the
# checkpoint, the Hugging Face export opened by transformers (77 without it).
px_add_py_test(model_walkthrough ${PX_MODEL_TEST_DIR}/test_walkthrough.py ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(model_walkthrough PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 RESOURCE_LOCK cores)

# Tiers (tests/CMakeLists.txt).
px_tier(unit model_ops_gradcheck model_ops_isa_clones model_reference_pytorch model_train_state model_gpt_determinism
        model_files_corrupt model_data_sampler model_sample)
px_tier(process model_standalone_train model_phalanx_data model_phalanx_sample model_config_layouts
        model_config_vocab)
px_tier(chaos model_config_chaos)
px_tier(slow model_recompute_job model_walkthrough)
