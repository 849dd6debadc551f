# Kubernetes manifests, checked offline: deploy/k8s renders with
# `kubectl kustomize` (kustomize v5 needed: missing is a failure, not a skip),
# every object passes the strict schemas of kubernetes-validate for
# Kubernetes 1.29 (the oldest supported) and the newest it holds, phalanx's
# own lint (tests/deploy/k8s_lint.py) finds nothing and reports
# each deliberately broken manifest, the overlays hold what they promise, and
# the committed groups/ are what make-groups.py writes (one ctest per
# scenario, a few seconds each).
px_add_py_scenarios(deploy_k8s ${CMAKE_CURRENT_LIST_DIR}/deploy/test_k8s_manifests.py ${PROJECT_SOURCE_DIR}/deploy/k8s 120
                    render validate lint lint-selftest refs groups)

# The manifests exercised: the cpu-demo's own commands,
# environment and volumes run as containers of the image scripts/image.sh
# builds (podman; plain processes, said so, where podman is missing); its
# spare shows in /status; one training group's worker container is
# SIGKILLed, its group is dropped, the spare takes its place
# (spare_promoted) and heals, the replacement pod registers as the new
# spare; then every worker is SIGKILLed, and their replacements restore the
# newest checkpoint from the claim's volume and train on from its step; the
# job finishes. The first run on a machine builds the image (debootstrap,
# then compiling in the build stage): minutes.
px_add_py_test(deploy_k8s_run ${CMAKE_CURRENT_LIST_DIR}/deploy/test_k8s_run.py $<TARGET_FILE_DIR:phalanx-worker>)
set_tests_properties(deploy_k8s_run PROPERTIES TIMEOUT 1800 RESOURCE_LOCK cores)

# The image as docs/deploy.md says to run it with podman: its "Run the image
# with podman" block as written (a coordinator and a worker container train a
# short job), and `phalanxctl plot` in the image failing in one line (exit
# 1). Skipped (77, said so) without podman. The block uses the host's
# network (ports 7777 and 8080, as deploy_k8s_run does): they take turns.
px_add_py_scenarios(deploy_image ${CMAKE_CURRENT_LIST_DIR}/deploy/test_image.py $<TARGET_FILE_DIR:phalanx-worker> 1800
                    docs plot)
set_tests_properties(deploy_image_docs deploy_image_plot PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK cores)

# Tiers (tests/CMakeLists.txt).
px_tier(unit deploy_k8s_render deploy_k8s_validate deploy_k8s_lint deploy_k8s_lint_selftest deploy_k8s_refs
        deploy_k8s_groups)
px_tier(slow deploy_k8s_run deploy_image_docs deploy_image_plot)
