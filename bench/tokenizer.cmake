# Tokenizer throughput (docs/benchmarks.md, "Tokenizer"), run by hand:
#   python3 bench/tok_encode.py build/bin   phalanx's encoder vs HF tokenizers' encode_batch, same ids
add_executable(bench_tok_encode ${CMAKE_CURRENT_LIST_DIR}/tok_encode.c)
target_link_libraries(bench_tok_encode PRIVATE px_tokenizer Threads::Threads)
