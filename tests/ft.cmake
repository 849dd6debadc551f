# Fault-tolerance (chaos) tests: real coordinator, launcher and workers on
# loopback, real SIGKILL/SIGSTOP. Fixed seeds, printed on failure.
# Registered unconditionally: a missing test file fails the configure
# (px_add_py_test checks), it never vanishes silently from ctest.
foreach(t chaos_kills chaos_ranks buckets sigstop coordinator_outage coordinator_stall heal_kill job_finished
          launch_sigkill launch_config_error launch_incomplete)
  px_add_py_test(ft_${t} ${CMAKE_CURRENT_LIST_DIR}/ft/test_${t}.py $<TARGET_FILE_DIR:phalanx-launch>)
  set_tests_properties(ft_${t} PROPERTIES TIMEOUT 600)
  if(NOT t STREQUAL "launch_config_error") # refused before anything trains
    set_tests_properties(ft_${t} PROPERTIES RESOURCE_LOCK cores)
  endif()
endforeach()

# DiLoCo: identity with synchronous training, a group killed during inner
# steps, seeded chaos, checkpoints, automatic mode switching, Streaming
# DiLoCo, refusals (one ctest per scenario).
px_add_py_scenarios(ft_diloco ${CMAKE_CURRENT_LIST_DIR}/ft/test_diloco.py $<TARGET_FILE_DIR:phalanx-launch> 600
                    identity kill chaos chaos-overlap checkpoint dtype layouts long-round auto auto-fragments auto-chaos
                    auto-chaos-overlap auto-restart fragments overlap warmup quality refused)
foreach(s identity kill chaos chaos_overlap checkpoint dtype layouts long_round auto auto_fragments auto_chaos
          auto_chaos_overlap auto_restart fragments overlap warmup quality)
  set_tests_properties(ft_diloco_${s} PROPERTIES RESOURCE_LOCK cores)
endforeach()

# What an operator watches, during a real 3-group job with a kill: /metrics
# through Prometheus' own parser (prometheus_client) and the dashboard
# rendered by headless Chromium (DOM checks, a screenshot), and the page kept
# open across a coordinator restart. Each skips (77)
# with the reason when its tool is missing; scripts/install-deps.sh installs both.
px_add_py_scenarios(ft_dashboard ${CMAKE_CURRENT_LIST_DIR}/ft/test_dashboard.py $<TARGET_FILE_DIR:phalanx-launch> 300
                    metrics browser scale restart spares)
set_tests_properties(ft_dashboard_metrics ft_dashboard_browser ft_dashboard_scale ft_dashboard_restart
                     ft_dashboard_spares PROPERTIES RESOURCE_LOCK cores SKIP_RETURN_CODE 77)

# Group-level liveness: ranks heartbeat their group's rank 0, which reports
# for them; a killed rank, a frozen leader, a restarted coordinator.
px_add_py_scenarios(ft_liveness ${CMAKE_CURRENT_LIST_DIR}/ft/test_liveness_group.py $<TARGET_FILE_DIR:phalanx-launch> 300
                    train restart)
set_tests_properties(ft_liveness_train ft_liveness_restart PROPERTIES RESOURCE_LOCK cores)

# phalanx-launch's terminal: a progress line every few seconds (not every
# step) with the failures still shown, --progress json, data preparation in
# one line.
px_add_py_scenarios(ft_launch_progress ${CMAKE_CURRENT_LIST_DIR}/ft/test_launch_progress.py
                    $<TARGET_FILE_DIR:phalanx-launch> 300 interval json dataprep)

# docs/operations.md's "Two machines", run as written: two network namespaces
# joined by a veth pair play the hosts (coordinator and groups a0, a1 on one,
# b0 on the other); b0 is SIGKILLed and heals from the other host. Needs root
# (CAP_SYS_ADMIN) for the namespaces: skipped (77) without.
px_add_py_test(ft_two_hosts ${CMAKE_CURRENT_LIST_DIR}/ft/test_two_hosts.py $<TARGET_FILE_DIR:phalanx-launch>)
set_tests_properties(ft_two_hosts PROPERTIES TIMEOUT 600 RESOURCE_LOCK cores SKIP_RETURN_CODE 77)

# Spare groups (--spares, --target-groups): a killed group's place taken by
# the spare at once (or a drained one's), the killed group back as a spare, a
# spare of another layout refused; the spare itself killed or stopped (no
# quorum changes for it), two losses for one spare (the job goes on as 2
# groups), seeded kills each answered by the spare.
px_add_py_scenarios(ft_spares ${CMAKE_CURRENT_LIST_DIR}/ft/test_spares.py $<TARGET_FILE_DIR:phalanx-launch> 300
                    promote comeback drain layout spare-dies spare-frozen two-losses chaos)
set_tests_properties(ft_spares_promote ft_spares_comeback ft_spares_drain ft_spares_layout ft_spares_spare_dies
                     ft_spares_spare_frozen ft_spares_two_losses ft_spares_chaos PROPERTIES RESOURCE_LOCK cores)
set_tests_properties(ft_spares_chaos PROPERTIES TIMEOUT 600) # 8,000 steps, kills waiting out restarts

# Tiers (tests/CMakeLists.txt).
px_tier(process ft_launch_progress_json ft_launch_progress_dataprep
        ft_buckets ft_job_finished ft_launch_config_error ft_diloco_identity ft_diloco_dtype
        ft_diloco_checkpoint ft_diloco_warmup ft_diloco_refused ft_dashboard_metrics ft_dashboard_browser)
px_tier(chaos ft_spares_promote ft_spares_comeback ft_spares_drain ft_spares_layout ft_spares_spare_dies ft_spares_spare_frozen
        ft_spares_two_losses ft_launch_progress_interval ft_chaos_ranks ft_coordinator_outage ft_launch_sigkill ft_launch_incomplete ft_diloco_kill
        ft_diloco_chaos ft_diloco_chaos_overlap ft_diloco_auto_restart ft_liveness_train ft_liveness_restart
        ft_dashboard_restart ft_dashboard_spares ft_two_hosts)
px_tier(slow ft_chaos_kills ft_sigstop ft_coordinator_stall ft_heal_kill ft_diloco_layouts ft_diloco_long_round
        ft_diloco_auto ft_diloco_auto_fragments ft_diloco_auto_chaos ft_diloco_auto_chaos_overlap ft_diloco_overlap
        ft_diloco_quality ft_diloco_fragments ft_dashboard_scale ft_spares_chaos)
