# The commands from README.md: `make demo`, `make test` and `make test-all`.
# Each installs missing Debian packages, configures and builds first.
BUILD ?= build
JOBS ?= $(shell nproc)
# Tests at once: one more than the cores, since most of them wait on
# sockets and timers; those that train a job take turns (RESOURCE_LOCK
# cores, tests/CMakeLists.txt).
TEST_JOBS ?= $(shell expr $(JOBS) + 1)
# The fast tiers (tests/CMakeLists.txt): `make test` runs these.
FAST_TIERS = ^(unit|process|chaos)$$
CMAKE_FLAGS ?=

.PHONY: all deps configure build test test-all demo image clean

all: build

deps:
	./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest -L '$(FAST_TIERS)' --output-on-failure --timeout 900 -j $(TEST_JOBS)

# Every tier: slow, gpu (skipped without a GPU) and the fast ones. What CI runs.
test-all: build
	cd $(BUILD) && ctest --output-on-failure --timeout 900 -j $(TEST_JOBS)

demo: build
	./scripts/demo.sh $(BUILD)

# The OCI image (deploy/Containerfile) with podman; see docs/deploy.md.
image: deps
	./scripts/image.sh

clean:
	rm -rf $(BUILD)
