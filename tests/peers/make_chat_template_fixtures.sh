#!/usr/bin/env bash
# Regenerate tests/peers/fixtures/chat_templates/*.json: the chat templates of the common model families
# rendered by transformers' apply_chat_template over a table of conversations (system prompts, multi-turn,
# tools, tool calls and tool results, documents, chat_template_kwargs). tests/coordinator/jinja_template_test.cpp
# renders the same inputs with our engine (llama.cpp's Jinja) and compares byte for byte.
# Template sources (no network to the HF hub here): llama.cpp's models/templates/*.jinja in the llama-cpp-python
# sdist that launch/setup extracts — each file is the chat_template of the tokenizer_config.json of the HF
# repo it is named after (llama.cpp's scripts/get_chat_template.py wrote them); SmolLM2's comes from our model's
# GGUF (tokenizer.chat_template, the same text as HuggingFaceTB/SmolLM2-135M-Instruct's tokenizer_config.json).
# The virtualenv (transformers, ~100 MB, no torch) lives in third_party/chat-template-venv; CI never runs this
# script: it uses the committed fixtures.
# Usage: tests/peers/make_chat_template_fixtures.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VENV=third_party/chat-template-venv
tests/e2e/venv.sh "$VENV" transformers==5.24.0 jinja2==3.1.6 tokenizers==0.23.3 gguf==0.19.0
TEMPLATES=third_party/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates
[ -d "$TEMPLATES" ] || { echo "no $TEMPLATES: run launch/setup first" >&2; exit 1; }
OUT=tests/peers/fixtures/chat_templates
mkdir -p "$OUT"
TZ=UTC "$VENV/bin/python" tests/peers/make_chat_template_fixtures.py "$TEMPLATES" models/SmolLM2-135M-Instruct.Q4_1.gguf "$OUT"
du -sh "$OUT"
