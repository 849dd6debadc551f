# Tokenizer tests (docs/tokenizer.md, "Tests"): the C table test, then the
# equality with Hugging Face `tokenizers` (skipped, 77, when it is missing).
add_executable(test_tokenizer ${CMAKE_CURRENT_LIST_DIR}/tokenizer/test_tokenizer.c)
target_link_libraries(test_tokenizer PRIVATE px_tokenizer px_testlib)
add_test(NAME tokenizer_unit COMMAND test_tokenizer)

# tok_tool: encodes, decodes and trains for the Python test.
add_executable(tok_tool ${CMAKE_CURRENT_LIST_DIR}/tokenizer/tok_tool.c)
target_link_libraries(tok_tool PRIVATE px_tokenizer)
px_add_py_test(tokenizer_hf_equal ${CMAKE_CURRENT_LIST_DIR}/tokenizer/test_hf_equal.py $<TARGET_FILE_DIR:tok_tool>)
set_tests_properties(tokenizer_hf_equal PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

# Tiers (tests/CMakeLists.txt).
px_tier(unit tokenizer_unit)
px_tier(process tokenizer_hf_equal)
