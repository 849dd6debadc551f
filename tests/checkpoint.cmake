# Checkpoint tests (issue 8): the library against real files (round trip,
# sliced layouts, every kind of damage, retention, a full disk).
add_executable(test_ckpt ${CMAKE_CURRENT_LIST_DIR}/checkpoint/test_ckpt.c)
target_include_directories(test_ckpt PRIVATE ${CMAKE_CURRENT_LIST_DIR}/lib)
target_link_libraries(test_ckpt PRIVATE px_checkpoint)
add_test(NAME checkpoint_format COMMAND test_ckpt)
