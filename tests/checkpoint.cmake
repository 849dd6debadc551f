# Checkpoint tests: the library against real files (round trip,
# sliced layouts, every kind of damage, retention, a full disk).
add_executable(test_ckpt ${CMAKE_CURRENT_LIST_DIR}/checkpoint/test_ckpt.c)
target_include_directories(test_ckpt PRIVATE ${CMAKE_CURRENT_LIST_DIR}/lib)
target_link_libraries(test_ckpt PRIVATE px_checkpoint)
add_test(NAME checkpoint_format COMMAND test_ckpt)

# Checkpoints in real jobs: whole-job kill and identical resume, a corrupt
# newest checkpoint skipped, fewer groups, a folder per group, SIGTERM, a
# full disk, the writer killed, every checkpoint corrupt, a disk slower than
# the interval (saves deferred, training never waits), saves by time (one
# ctest per scenario).
px_add_py_scenarios(checkpoint_job ${CMAKE_CURRENT_LIST_DIR}/checkpoint/test_ckpt_job.py ${CMAKE_BINARY_DIR}/bin 400
                    resume resume_overlap corrupt fewer pergroup mixed sigterm rotate diskfull allcorrupt schedule slowdisk
                    slowdisk_sharded every_s)

# phalanx-ckpt on a trained tiny model: import and export round trips (llm.c
# byte for byte, safetensors read back by Hugging Face's reader), the same
# eval loss, a job resumed from an import, damaged checkpoints and inputs,
# bad command lines, a checkpoint with DiLoCo's outer momentum (one ctest
# per scenario).
px_add_py_scenarios(checkpoint_tool ${CMAKE_CURRENT_LIST_DIR}/checkpoint/test_ckpt_tool.py ${CMAKE_BINARY_DIR}/bin 300
                    roundtrip safetensors eval job damage usage diloco)

# phalanx-ckpt and transformers both ways (export --format hf of a trained
# BPE model loaded by AutoModelForCausalLM and AutoTokenizer, the same eval
# loss; a GPT2LMHeadModel saved by transformers imported and fine-tuned,
# twice alike; bad folders refused). export and import skip (77) without
# torch and transformers; refuse needs numpy and safetensors only.
px_add_py_scenarios(checkpoint_hf ${CMAKE_CURRENT_LIST_DIR}/checkpoint/test_hf_roundtrip.py ${CMAKE_BINARY_DIR}/bin 300
                    export import refuse)
set_tests_properties(checkpoint_hf_export checkpoint_hf_import PROPERTIES SKIP_RETURN_CODE 77)

# SIGKILL of the writer mid-save, 20 seeds: nothing published loads wrong,
# and the restarted worker restores the newest published step (about a
# minute on 2 cores).
px_add_py_test(checkpoint_kill_during_save ${CMAKE_CURRENT_LIST_DIR}/checkpoint/test_ckpt_kill.py ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(checkpoint_kill_during_save PROPERTIES TIMEOUT 300)

# Tiers (tests/CMakeLists.txt).
px_tier(unit checkpoint_format)
px_tier(process checkpoint_job_fewer checkpoint_job_corrupt checkpoint_job_diskfull checkpoint_job_allcorrupt
        checkpoint_job_schedule checkpoint_job_slowdisk checkpoint_job_slowdisk_sharded checkpoint_job_every_s
        checkpoint_tool_roundtrip
        checkpoint_tool_safetensors checkpoint_tool_eval checkpoint_tool_job checkpoint_tool_damage
        checkpoint_tool_usage checkpoint_tool_diloco checkpoint_hf_export checkpoint_hf_import checkpoint_hf_refuse)
px_tier(chaos checkpoint_job_resume checkpoint_job_resume_overlap checkpoint_job_pergroup checkpoint_job_mixed
        checkpoint_job_sigterm checkpoint_job_rotate)
px_tier(slow checkpoint_kill_during_save)
