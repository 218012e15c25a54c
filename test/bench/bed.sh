# Sourced, from the repository's root, by the bench scripts that run a Go
# bench on the test bed, so each says only what its bench measures.

# bed_up builds ferryd and the bench test/bench/$1 into bin/, and brings
# the bed up with ferryd; the bed comes down again when the script exits,
# however it exits.
bed_up() {
  make -s build
  go build -o "bin/$1" "./test/bench/$1"
  trap bed_down EXIT
  bin/testbed up --ferryd bin/ferryd >/dev/null
}

# bed_down copies the bed's daemon and guest logs to BENCH_LOGS, if set,
# before taking the bed down: they go with it.
bed_down() {
  local dir n
  if [[ -n "${BENCH_LOGS:-}" ]]; then
    dir=$(bin/testbed env 2>/dev/null | sed -n 's/^FERRY_TESTBED_DIR=//p')
    for n in a b; do
      mkdir -p "$BENCH_LOGS/$n"
      find "$dir/$n" -maxdepth 4 -name '*.log' -exec cp {} "$BENCH_LOGS/$n/" \; 2>/dev/null || true
    done
  fi
  bin/testbed down >/dev/null 2>&1 || true
}
