#!/bin/sh
# The engine binary of examples/h200-llamacpp.toml (engine_options.binary; scripts/gpu/llamacpp_h200.sh
# copies it to /tmp/ll/llama-server-of-build). It execs the real llama-server of the build named by
# $LLAMA_BUILD (an env axis of the spec: sm90 = built for the H200, sm100 = built for Blackwell only,
# no PTX), so the process bakeoff watches IS that llama-server. bakeoff's env axes always set a value,
# while llama.cpp reads some variables by presence (GGML_CUDA_DISABLE_GRAPHS): a GGML_* variable
# whose value is the word "unset" is removed here before the exec.
for v in $(env | sed -n 's/^\(GGML_[A-Z0-9_]*\)=unset$/\1/p'); do unset "$v"; done
exec "${LLAMA_BUILDS:-/tmp/ll}/build-${LLAMA_BUILD:-sm90}/bin/llama-server" "$@"
