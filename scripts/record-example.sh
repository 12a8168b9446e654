#!/usr/bin/env bash
# Re-records examples/hello.cassette.jsonl from the scripted fake model in
# examples/hello.script.json. Run it after changing prompts or tools: the
# replay compares every request with the recorded one.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'kill $fake 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/agent" .
go build -o "$tmp/fakemodel" ./llm/llmtest/fakemodel
"$tmp/fakemodel" -script examples/hello.script.json > "$tmp/url" &
fake=$!
for _ in $(seq 50); do [ -s "$tmp/url" ] && break; sleep 0.1; done

mkdir "$tmp/ws"
rm -f examples/hello.cassette.jsonl
AGENT_HOME="$tmp/home" OPENAI_BASE_URL="$(head -1 "$tmp/url")" OPENAI_API_KEY= AGENT_MODEL=gpt-4o-mini \
  "$tmp/agent" run --workspace "$tmp/ws" --record examples/hello.cassette.jsonl "$(cat examples/hello.prompt)"
echo "recorded examples/hello.cassette.jsonl" >&2
