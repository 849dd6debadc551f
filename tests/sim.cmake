# phalanx-sim: the simulator against Daly's closed form, with
# failures off, the Llama 3 rate, seeds, spares; the command line (flags named in
# errors, a seed reproducing the CSV byte for byte, spares needing the
# promotion figure the checked-in figures hold). Seconds each.
add_executable(test_sim ${CMAKE_CURRENT_LIST_DIR}/sim/test_sim.c)
target_include_directories(test_sim PRIVATE ${CMAKE_CURRENT_LIST_DIR}/lib)
target_link_libraries(test_sim PRIVATE px_sim)
add_test(NAME sim_model COMMAND test_sim)

add_test(NAME sim_cli COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/sim/test_sim_cli.sh $<TARGET_FILE:phalanx-sim>
                              ${CMAKE_SOURCE_DIR}/bench/sim_figures.json)
set_tests_properties(sim_model sim_cli PROPERTIES TIMEOUT 120)

# Tiers (tests/CMakeLists.txt).
px_tier(unit sim_model)
px_tier(process sim_cli)
