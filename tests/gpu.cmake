# GPU tests. Every one is registered on every machine, so the report always
# lists them; where they cannot run they are SKIPPED with the reason printed,
# never reported as passed:
#   gpu_cuda_available  px_cuda_available() answers truthfully; runs (and must
#                       pass) with or without a GPU; links every public CUDA
#                       function
#   gpu_ops             each CUDA op against its CPU twin (needs px_kernels)
#   gpu_ops_bf16        each bf16-storage overload against the FP32 CUDA op of
#                       the same name on the same bf16-rounded inputs
#   gpu_flash           the fused attention (bf16 tensor cores) against the CPU
#                       attention, T up to 2048, head sizes 16 to 128; reruns
#                       bitwise equal (needs px_kernels)
#   gpu_model           the CUDA model against the CPU model (needs px_model)
#   gpu_reference       the CUDA model against the PyTorch fixture of
#                       tests/reference, same tolerances as the CPU (needs px_model)
#   gpu_distributed_parity  phalanx-worker --device cuda, 2 groups x 1 rank under
#                       phalanx-launch: final loss = the CPU run's within 1e-3,
#                       equal checksums (tests/gpu/test_distributed.py)
#   gpu_distributed_kill    the same with g1 SIGKILLed: restarted, healed, equal
#                       checksums
#   gpu_distributed_ranks2  2 groups x 2 ranks (NCCL inside groups too), g1's rank 1
#                       SIGKILLed: restarted, given the state, equal checksums
#   gpu_distributed_checkpoint  a checkpoint a GPU job saved halfway, restored by
#                       a CPU job: the same final loss within 1e-3
#   gpu_distributed_sharded  2 groups of fsdp2, tp2 and fsdp2 x tp2 ranks on GPUs
#                       (NCCL all-gathers, reduce-scatters, tp sums, HSDP):
#                       final loss = the CPU run's of the layout within 1e-3
#   gpu_distributed_sharded_kill  2 groups of fsdp2 x tp2, a rank SIGKILLed:
#                       dropped, restarted, healed, equal checksums
#   gpu_distributed_sharded_checkpoint  checkpoints and --save written by GPU
#                       shards, restored by whole replicas on the CPU
#   gpu_distributed_pipeline  2 groups of pp2 (gpipe, 1f1b, zb-h1), pp2 x tp2,
#                       pp2 x fsdp2 on GPUs (NCCL links): final loss = the same
#                       layout's CPU run's within 1e-3, --save from the stages
#   gpu_distributed_pipeline_kill  2 groups of pp2 x fsdp2, a rank SIGKILLed:
#                       dropped, restarted, healed, equal checksums
#   gpu_distributed_recompute  --recompute block in fsdp2 x tp2 and pp2 zb-h1
#                       groups: final loss = the same layout's CPU run's within 1e-3
#   gpu_distributed_diloco  --mode diloco on GPUs (whole replicas of 1 and 2
#                       ranks, fsdp2, pp2, streaming int8 overlapped, a sync
#                       warmup): the CPU job's outer steps and final loss
#   gpu_distributed_diloco_auto  --mode auto on GPUs: a kill switches the job
#                       to DiLoCo and back to sync, healed, equal checksums
#   gpu_bf16_quality    --precision bf16: small 300 and gpt2-124m 100 steps
#                       within 1% of fp32's losses; reruns bitwise equal
#   gpu_bf16_layouts    bf16 in whole replicas, fsdp2, tp2, pp2, fsdp2 x tp2
#                       and DiLoCo: within 1e-2 of whole replicas, equal
#                       checksums
#   gpu_bf16_kill       bf16, g1 SIGKILLed: restarted, healed, equal checksums
#   gpu_bf16_checkpoint a bf16 job's checkpoint restored by a CPU job
#                       (tests/gpu/test_bf16.py)
# A test binary exits 77 when no usable GPU is present (SKIP_RETURN_CODE).
# That every .cu file compiles is proven by the build itself: px_kernels_cuda
# and px_model_cuda are part of `all` wherever nvcc exists.
set(PX_GPU_TESTS gpu_cuda_available gpu_ops gpu_ops_bf16 gpu_flash gpu_model gpu_reference gpu_distributed_parity
                gpu_distributed_kill gpu_distributed_ranks2 gpu_distributed_checkpoint gpu_distributed_sharded
                gpu_distributed_sharded_kill gpu_distributed_sharded_checkpoint gpu_distributed_pipeline
                gpu_distributed_pipeline_kill gpu_distributed_recompute gpu_distributed_diloco
                gpu_distributed_diloco_auto gpu_bf16_quality gpu_bf16_layouts gpu_bf16_kill gpu_bf16_checkpoint)

function(px_gpu_skipped_test name reason)
  add_test(NAME ${name} COMMAND sh -c "echo 'SKIP: ${reason}'; exit 77")
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
endfunction()

if(NOT PHALANX_HAVE_CUDA OR NOT TARGET px_kernels_cuda)
  foreach(t ${PX_GPU_TESTS})
    px_gpu_skipped_test(${t} "built without CUDA: no nvcc at configure time (install the CUDA toolkit and reconfigure)")
  endforeach()
  return()
endif()

add_executable(test_cuda_available ${CMAKE_CURRENT_LIST_DIR}/gpu/test_cuda_available.c)
# With the CPU library present, px_cuda_available() comes from it (device.c).
if(TARGET px_kernels)
  target_link_libraries(test_cuda_available PRIVATE px_kernels)
endif()
target_link_libraries(test_cuda_available PRIVATE px_model_cuda px_kernels_cuda)
add_test(NAME gpu_cuda_available COMMAND test_cuda_available)
set_tests_properties(gpu_cuda_available PROPERTIES LABELS gpu TIMEOUT 120)

# The bf16 overloads against the FP32 CUDA ops: needs only the CUDA side.
add_executable(test_gpu_ops_bf16 ${CMAKE_CURRENT_LIST_DIR}/gpu/test_gpu_ops_bf16.cpp)
target_link_libraries(test_gpu_ops_bf16 PRIVATE px_kernels_cuda m)
add_test(NAME gpu_ops_bf16 COMMAND test_gpu_ops_bf16)
set_tests_properties(gpu_ops_bf16 PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 300)

if(TARGET px_kernels)
  add_executable(test_gpu_ops ${CMAKE_CURRENT_LIST_DIR}/gpu/test_gpu_ops.c)
  target_link_libraries(test_gpu_ops PRIVATE px_kernels px_kernels_cuda m)
  add_test(NAME gpu_ops COMMAND test_gpu_ops)
  set_tests_properties(gpu_ops PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 600)

  add_executable(test_gpu_flash ${CMAKE_CURRENT_LIST_DIR}/gpu/test_gpu_flash.c)
  target_link_libraries(test_gpu_flash PRIVATE px_kernels px_kernels_cuda m)
  add_test(NAME gpu_flash COMMAND test_gpu_flash)
  set_tests_properties(gpu_flash PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 600)
else()
  foreach(t gpu_ops gpu_flash)
    px_gpu_skipped_test(${t} "the CPU ops (px_kernels) are not in this tree, nothing to compare against")
  endforeach()
endif()

if(TARGET px_model)
  add_executable(test_gpu_model ${CMAKE_CURRENT_LIST_DIR}/gpu/test_gpu_model.c)
  target_link_libraries(test_gpu_model PRIVATE px_model px_model_cuda px_kernels_cuda px_common m)
  add_test(NAME gpu_model COMMAND test_gpu_model)
  set_tests_properties(gpu_model PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 600)

  add_executable(test_gpu_reference ${CMAKE_CURRENT_LIST_DIR}/gpu/test_gpu_reference.c)
  target_link_libraries(test_gpu_reference PRIVATE px_model px_model_cuda px_kernels_cuda m)
  add_test(NAME gpu_reference
           COMMAND test_gpu_reference ${CMAKE_CURRENT_LIST_DIR}/reference)
  set_tests_properties(gpu_reference PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 300)
else()
  foreach(t gpu_model gpu_reference)
    px_gpu_skipped_test(${t} "the CPU model (px_model) is not in this tree, nothing to compare against")
  endforeach()
endif()

# The distributed trainer on the GPU: Python scripts that skip (77, with the
# reason) when test_cuda_available finds no usable GPU.
foreach(scenario parity kill ranks2 checkpoint sharded sharded_kill sharded_checkpoint pipeline pipeline_kill recompute
                 diloco diloco_auto)
  px_add_py_test(gpu_distributed_${scenario} ${CMAKE_CURRENT_LIST_DIR}/gpu/test_distributed.py
                 $<TARGET_FILE_DIR:phalanx-launch> ${scenario})
  set_tests_properties(gpu_distributed_${scenario} PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 900
                       RUN_SERIAL TRUE)
endforeach()

foreach(scenario quality layouts kill checkpoint)
  px_add_py_test(gpu_bf16_${scenario} ${CMAKE_CURRENT_LIST_DIR}/gpu/test_bf16.py
                 $<TARGET_FILE_DIR:phalanx-launch> ${scenario})
  set_tests_properties(gpu_bf16_${scenario} PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 900 RUN_SERIAL TRUE)
endforeach()
