# The two commands from README.md: `make demo` and `make test`.
# Both install missing Debian packages, configure and build first.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test demo image clean

all: build

deps:
	./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 900 -j 1

demo: build
	./scripts/demo.sh $(BUILD)

# The OCI image (deploy/Containerfile) with podman; see docs/deploy.md.
image: deps
	./scripts/image.sh

clean:
	rm -rf $(BUILD)
