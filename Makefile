# MLSys Lab build. `make run` opens the lab, `make test` runs every test; both install the
# Debian packages they need first. Capabilities are probed and printed as one line each.
# Quiet unless V=1.

PKGS_REQUIRED := build-essential pkg-config libncurses-dev libopenmpi-dev openmpi-bin check \
                 libmd4c-dev libcjson-dev libhwloc-dev libopenblas-dev tmux iproute2 \
                 libmicrohttpd-dev curl
BUILD   ?= build
CC      ?= cc
OPT     ?= -O2 -g
CFLAGS  ?=
# -fno-math-errno: sqrtf and friends need not set errno (nothing here reads it after maths),
# so their loops vectorise (AdamW's step); every result stays the same, bit for bit
CFLAGS  += -std=c11 -Wall -Wextra -Werror $(OPT) -D_GNU_SOURCE -ftree-vectorize \
           -fvect-cost-model=dynamic -fno-strict-aliasing -fno-math-errno -MMD -MP
LDLIBS  += -lm -lpthread
SAN     ?=
ifneq ($(SAN),)
CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# -O1 sees other paths than -O2: display code that cuts a line on purpose would stop it
CFLAGS  += -Wno-error=format-truncation
LDFLAGS += -fsanitize=$(SAN)
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

# ---- capability probes (each prints one line on `make features`) ----
HAVE_NCURSES := $(shell pkg-config --exists ncursesw && echo 1)
HAVE_CHECK   := $(shell pkg-config --exists check && echo 1)
HAVE_MPI     := $(shell command -v mpicc >/dev/null 2>&1 && echo 1)
HAVE_MD4C    := $(shell pkg-config --exists md4c && echo 1)
HAVE_CJSON   := $(shell pkg-config --exists libcjson && echo 1)
HAVE_HWLOC   := $(shell pkg-config --exists hwloc && echo 1)
HAVE_BLAS    := $(shell pkg-config --exists openblas && echo 1)
HAVE_MHD     := $(shell pkg-config --exists libmicrohttpd && echo 1)
CUDA_HOME    ?= /usr/local/cuda
HAVE_NCCL    := $(shell test -x $(CUDA_HOME)/bin/nvcc && test -f $(CUDA_HOME)/include/nccl.h && echo 1)
HAVE_NVCC    := $(shell test -x $(CUDA_HOME)/bin/nvcc && echo 1)

# The front end's libraries: mlsys-lab links them, a rank's program (mlsys-lab-rank) does not.
ifeq ($(HAVE_NCURSES),1)
CFLAGS += -DHAVE_NCURSES $(shell pkg-config --cflags ncursesw)
UI_LDLIBS += $(shell pkg-config --libs ncursesw) -lpanelw
endif
ifeq ($(HAVE_MD4C),1)
CFLAGS += -DHAVE_MD4C
UI_LDLIBS += $(shell pkg-config --libs md4c)
endif
LDLIBS += $(UI_LDLIBS)
ifeq ($(HAVE_CJSON),1)
CFLAGS += -DHAVE_CJSON $(shell pkg-config --cflags libcjson)
LDLIBS += $(shell pkg-config --libs libcjson)
endif
ifeq ($(HAVE_BLAS),1)
CFLAGS += -DHAVE_OPENBLAS $(shell pkg-config --cflags openblas)
# no -lopenblas: core/nn/gemm.c loads the library (dlopen) at the first multiply that needs it
endif
ifeq ($(HAVE_MHD),1)
CFLAGS += -DHAVE_MHD $(shell pkg-config --cflags libmicrohttpd)
# no -lmicrohttpd: core/serve/mhd_lib.c loads it (dlopen) when a server starts
endif
ifeq ($(HAVE_HWLOC),1)
CFLAGS += -DHAVE_HWLOC
# no -lhwloc: chapters/ch04/hwloc_lib.c loads it (dlopen) when the topology is read
endif

# The features found are recorded in $(BUILD)/features.flags (the flags they give); every
# object depends on it, so installing or removing a library rebuilds with or without it
# instead of keeping what the first `make` found. The file changes only when the flags do.
FEATURES_STAMP := $(BUILD)/features.flags
FEATURES_LINE  := $(strip $(CC) $(CFLAGS) | $(LDLIBS))
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(shell mkdir -p $(BUILD) && printf '%s\n' '$(subst ','\'',$(FEATURES_LINE))' | \
    cmp -s - $(FEATURES_STAMP) || printf '%s\n' '$(subst ','\'',$(FEATURES_LINE))' > $(FEATURES_STAMP))
endif

# Whatever sits under core/ (but the transports built as plugins), lab/ and chapters/.
CORE_SRC := $(sort $(filter-out core/mpi/% core/nccl/%,$(shell find core -name '*.c')))
LAB_SRC  := $(sort $(filter-out lab/cli/main.c lab/cli/rank_main.c,$(shell find lab chapters -name '*.c')))
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
LAB_OBJ  := $(LAB_SRC:%.c=$(BUILD)/%.o)
BIN      := $(BUILD)/mlsys-lab
RANK_BIN := $(BUILD)/mlsys-lab-rank
RANK_LDLIBS := $(filter-out $(UI_LDLIBS),$(LDLIBS))
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all run test unit deps features asan bench clean
all: $(BIN) $(RANK_BIN)

$(BUILD)/%.o: %.c $(FEATURES_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC $<")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

# Archives are made afresh, and again whenever the list of sources changes (a file moved or
# went away): `ar r` into an old archive keeps the objects of sources that are gone, and
# their stale symbols would win at link time.
SOURCES_STAMP := $(BUILD)/sources.list
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(shell mkdir -p $(BUILD) && printf '%s\n' $(CORE_SRC) $(LAB_SRC) | cmp -s - $(SOURCES_STAMP) || \
    printf '%s\n' $(CORE_SRC) $(LAB_SRC) > $(SOURCES_STAMP))
endif
$(BUILD)/libmlsys.a: $(CORE_OBJ) $(SOURCES_STAMP)
	$(Q)rm -f $@ && ar rcs $@ $(CORE_OBJ)

$(BUILD)/liblab.a: $(LAB_OBJ) $(SOURCES_STAMP)
	$(Q)rm -f $@ && ar rcs $@ $(LAB_OBJ)

# What this build goes without, and the Debian packages that bring it (one line after linking)
MISSING := $(if $(HAVE_NCURSES),,ncursesw:libncurses-dev) $(if $(HAVE_MD4C),,md4c:libmd4c-dev) \
           $(if $(HAVE_CJSON),,cJSON:libcjson-dev) $(if $(HAVE_HWLOC),,hwloc:libhwloc-dev) \
           $(if $(HAVE_BLAS),,OpenBLAS:libopenblas-dev) $(if $(HAVE_MPI),,OpenMPI:libopenmpi-dev) \
           $(if $(HAVE_MHD),,libmicrohttpd:libmicrohttpd-dev)
MISSING := $(strip $(MISSING))

$(BIN): $(BUILD)/lab/cli/main.o $(BUILD)/liblab.a $(BUILD)/libmlsys.a
	@$(if $(Q),echo "  LD $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< -Wl,--whole-archive $(BUILD)/liblab.a -Wl,--no-whole-archive \
	    $(BUILD)/libmlsys.a $(LDLIBS)
	@$(if $(MISSING),echo "  note: built without $(foreach m,$(MISSING),$(firstword $(subst :, ,$(m)))); \
	    for all of the lab: apt-get install $(foreach m,$(MISSING),$(lastword $(subst :, ,$(m))))")

# What every rank of a lab's job runs: the labs and the runtime, no front end (rank_main.c).
# Only the archive members it needs are linked, so the UI's objects (and their libraries)
# stay out; a missing symbol here means a rank's code reached into the front end.
$(RANK_BIN): $(BUILD)/lab/cli/rank_main.o $(BUILD)/liblab.a $(BUILD)/libmlsys.a
	@$(if $(Q),echo "  LD $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/liblab.a $(BUILD)/libmlsys.a $(RANK_LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/liblab.a $(BUILD)/libmlsys.a $(FEATURES_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC $<")
	$(Q)$(CC) $(CFLAGS) $(shell pkg-config --cflags check) $(LDFLAGS) -o $@ $< \
	    -Wl,--whole-archive $(BUILD)/liblab.a -Wl,--no-whole-archive $(BUILD)/libmlsys.a \
	    $(shell pkg-config --libs check) $(LDLIBS)

# The MPI reference program for `make bench` (Debian's OpenMPI, vader transport).
$(BUILD)/bench/mpi_coll: tests/bench/mpi_coll.c
	@mkdir -p $(dir $@)
	$(Q)mpicc -O2 -std=c11 -D_GNU_SOURCE -o $@ $<

deps:
	$(Q)sh tests/deps.sh $(PKGS_REQUIRED)

features:
	@printf '%s ncursesw (terminal UI)\n'     "$(if $(HAVE_NCURSES),✓,✗)"
	@printf '%s Check (unit tests)\n'         "$(if $(HAVE_CHECK),✓,✗)"
	@printf '%s OpenMPI (mpicc)\n'            "$(if $(HAVE_MPI),✓,✗)"
	@printf '%s md4c (chapter texts)\n'       "$(if $(HAVE_MD4C),✓,✗)"
	@printf '%s cJSON (JSON output, replay)\n' "$(if $(HAVE_CJSON),✓,✗)"
	@printf '%s hwloc (topology)\n'           "$(if $(HAVE_HWLOC),✓,✗)"
	@printf '%s libmicrohttpd (the HTTP server: --serve)\n' "$(if $(HAVE_MHD),✓,✗)"
	@printf '%s OpenBLAS (cblas_sgemm for the models)\n' "$(if $(HAVE_BLAS),✓,✗)"
	@printf '%s CUDA + NCCL ($(CUDA_HOME))\n' "$(if $(HAVE_NCCL),✓,✗)"
	@printf '%s CUDA compiler (nvcc: chapter 10'"'"'s CUDA-graph plugin)\n' "$(if $(HAVE_NVCC),✓,✗)"

run: deps
	$(Q)$(MAKE) --no-print-directory features all
	$(Q)$(BIN)

ifeq ($(HAVE_CHECK),)
UNIT_BIN := no-check                    # one line instead of a compiler error per suite
endif
unit: $(UNIT_BIN) $(BIN) $(RANK_BIN)
	$(Q)sh tests/run-unit.sh $(BUILD) $(UNIT_BIN)
.PHONY: no-check
no-check:
	@echo "the unit tests need Check (pkg-config check): apt-get install check"; exit 2

# core/ includes nothing from lab/ or chapters/; a chapter nothing from lab/ but lab.h and
# lab/exercise/; and the built objects call across those lines only the same ways (nm: a
# call through a prototype written by hand counts too). tests/deps_rule.sh names FILE:LINE;
# deps_rule_test.sh proves it catches each kind.
.PHONY: deps-rule
deps-rule: $(CORE_OBJ) $(LAB_OBJ) $(BUILD)/lab/cli/main.o $(BUILD)/lab/cli/rank_main.o
	$(Q)sh tests/deps_rule_test.sh
	$(Q)sh tests/deps_rule.sh . $(BUILD)

test: deps
	$(Q)$(MAKE) --no-print-directory features
	$(Q)$(MAKE) --no-print-directory deps-rule
	$(Q)$(MAKE) --no-print-directory unit
	$(Q)$(MAKE) --no-print-directory ui-test
	$(Q)$(MAKE) --no-print-directory serve-test
	$(Q)$(MAKE) --no-print-directory mpi-tests
	$(Q)$(MAKE) --no-print-directory startup-test

# What a rank and `generate` load at start, and that they work where OpenBLAS, libmicrohttpd
# or hwloc is missing (hidden in a mount namespace where allowed)
.PHONY: startup-test
startup-test: all
	$(Q)bash tests/startup/missing_libs.sh $(BUILD)

.PHONY: ui-test
ui-test: $(BIN) $(RANK_BIN)
	$(Q)sh tests/ui/ui_test.sh $(BUILD)

# The official OpenAI Node client against --serve (npm installs it under $(BUILD); offline: skip,
# but fail under CI=true, which openai_ci.sh checks)
.PHONY: serve-test
serve-test: $(BIN) $(RANK_BIN)
	$(Q)sh tests/serve/openai_ci.sh $(BUILD)
	$(Q)sh tests/serve/openai.sh $(BUILD)

asan:
	$(Q)$(MAKE) --no-print-directory deps
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan SAN=address,undefined OPT="-O1 -g" unit

bench: deps
	$(Q)$(MAKE) --no-print-directory all $(BUILD)/bench/nn_mlp $(BUILD)/bench/serve_bench \
	    $(BUILD)/bench/tp_decode $(if $(HAVE_MPI),$(BUILD)/bench/mpi_coll)
	$(Q)sh tests/bench/run.sh $(BUILD)
	$(Q)sh tests/bench/models.sh $(BUILD)

# The chapter-5 MLP step on one rank (tests/bench/models.sh puts PyTorch beside it).
$(BUILD)/bench/nn_mlp: tests/bench/nn_mlp.c $(BUILD)/libmlsys.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) -std=c11 -O2 -D_GNU_SOURCE -o $@ $< $(BUILD)/libmlsys.a $(LDLIBS)

# Tensor-parallel decode on T ranks (tests/bench/tp.sh).
$(BUILD)/bench/tp_decode: tests/bench/tp_decode.c $(BUILD)/libmlsys.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) -std=c11 -O2 -D_GNU_SOURCE -rdynamic -o $@ $< $(BUILD)/libmlsys.a $(LDLIBS)

# The serving engine's figures (tests/bench/serve.sh).
$(BUILD)/bench/serve_bench: tests/bench/serve_bench.c $(BUILD)/libmlsys.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) -std=c11 -O2 -D_GNU_SOURCE -o $@ $< $(BUILD)/libmlsys.a $(LDLIBS)

clean:
	rm -rf build build-asan build-gpu

# ---- NCCL backend plugin: built only where nvcc and nccl.h exist; loaded with dlopen ----
NVCC      ?= $(CUDA_HOME)/bin/nvcc
NVCC_ARCH ?= -arch=all-major
NCCL_SO   := $(BUILD)/libmlsys-nccl.so
# plugins call back into the program's runtime (mlsys_send, ...)
LDFLAGS   += -rdynamic
ifeq ($(HAVE_NCCL),1)
all: $(NCCL_SO)
unit: $(NCCL_SO)
endif

$(BUILD)/core/nccl/nccl_transport.pic.o: core/nccl/nccl_transport.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC $<")
	$(Q)$(CC) $(CFLAGS) -fPIC -I$(CUDA_HOME)/include -c $< -o $@

$(BUILD)/core/nccl/nccl_kernels.o: core/nccl/nccl_kernels.cu core/nccl/nccl_plugin.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC $<")
	$(Q)$(NVCC) -O2 -std=c++17 -Xcompiler -fPIC $(NVCC_ARCH) -c $< -o $@

$(NCCL_SO): $(BUILD)/core/nccl/nccl_transport.pic.o $(BUILD)/core/nccl/nccl_kernels.o
	@$(if $(Q),echo "  LD $@")
	$(Q)$(CC) -shared $(LDFLAGS) -o $@ $^ -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
	    -lnccl -lcudart -lstdc++

-include $(BUILD)/core/nccl/nccl_transport.pic.d

# ---- chapter 10's CUDA-graph plugin: built where nvcc exists; loaded with dlopen ----
CUDAGRAPH_SO := $(BUILD)/libmlsys-cudagraph.so
ifeq ($(HAVE_NVCC),1)
all: $(CUDAGRAPH_SO)
unit: $(CUDAGRAPH_SO)
endif
$(CUDAGRAPH_SO): core/graph/cuda_graph.cu core/graph/graph.h
	@mkdir -p $(BUILD)/core/graph
	@$(if $(Q),echo "  NVCC $<")
	$(Q)$(NVCC) -O2 -std=c++17 -Xcompiler -fPIC $(NVCC_ARCH) -c $< -o $(BUILD)/core/graph/cuda_graph.o
	$(Q)$(CC) -shared -o $@ $(BUILD)/core/graph/cuda_graph.o -L$(CUDA_HOME)/lib64 \
	    -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++

# ---- MPI backend plugin: built where mpicc exists; loaded with dlopen under --backend mpi ----
MPI_SRC := $(wildcard core/mpi/*.c)
MPI_SO  := $(BUILD)/libmlsys-mpi.so
ifeq ($(HAVE_MPI),1)
all: $(MPI_SO)
unit: $(MPI_SO)
endif
$(MPI_SO): $(MPI_SRC) core/mlsys.h core/internal.h core/coll/coll.h core/net_events.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  MPICC $@")
	$(Q)mpicc -fPIC -shared -std=c11 -Wall -Wextra -Werror $(OPT) -D_GNU_SOURCE -o $@ $(MPI_SRC)

.PHONY: mpi-tests
mpi-tests: all
	$(Q)bash tests/mpi/run.sh $(BUILD)
	$(Q)bash tests/mpi/labs.sh $(BUILD)
	$(Q)bash tests/mpi/tp_serve.sh $(BUILD)
	$(Q)bash tests/mpi/netns.sh $(BUILD)

.PHONY: gpu fuzz-topo fuzz-llm fuzz-serve
gpu:
	$(Q)sh tests/gpu/run $(BUILD)-gpu
fuzz-topo:
	$(Q)sh tests/fuzz/run_topo.sh 60 $(BUILD)
fuzz-llm: all
	$(Q)sh tests/fuzz/run_llm.sh 60 $(BUILD)
fuzz-serve:
	$(Q)sh tests/fuzz/run_serve.sh 60 $(BUILD)

-include $(CORE_OBJ:.o=.d) $(LAB_OBJ:.o=.d) $(BUILD)/lab/cli/main.d $(BUILD)/lab/cli/rank_main.d
