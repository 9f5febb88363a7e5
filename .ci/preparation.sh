# Sourced by the .ci/install_*.sh scripts: one preparer of a thing at a time, across processes, and every
# release of a run prepared at once. Two processes preparing the same release at once (two test runs, a
# developer's and CI's, or the vLLM and SGLang preparers sharing a FlashInfer) would delete and rewrite each
# other's directories; with take_lock, the second one waits and then finds the thing ready.
#
# take_lock FILE WHO    take FILE's flock on a descriptor that stays open until the calling (sub)shell exits
#                       (its children inherit it: the lock outlives no one). When another process holds it,
#                       print one line, "WHO: waiting for <the holder's line> (lock FILE)", then wait. The
#                       holder's line (pid, what, since when, started by which command) is written into FILE.

take_lock() {
    local file=$1 who=$2 fd holder
    mkdir -p "$(dirname "$file")"
    exec {fd}<>"$file"  # read-write without truncating: the holder's line stays readable by waiters
    if ! flock -n "$fd"; then
        holder=$(head -n 1 "$file" 2>/dev/null)
        echo "$who: waiting for ${holder:-another process} (lock $file)"
        flock "$fd"
    fi
    printf 'pid %s preparing %s since %s, started by: %s\n' "$BASHPID" "$who" "$(date +%H:%M:%S)" \
        "$(ps -o args= -p "$PPID" 2>/dev/null | cut -c1-120)" > "$file"
}

# prepare_all ENGINE ROOT VERSION...   run the caller's `prepare VERSION` for every version at once, each in a
#                                      subshell with `set -e`; one that fails does not stop the others: its log's
#                                      last lines ($ROOT/<version>.log) go to stderr, and the exit status is 1.
prepare_all() {
    local engine=$1 root=$2 version i=0 pids=() failed=()
    shift 2
    for version in "$@"; do
        (set -e; prepare "$version") &
        pids+=($!)
    done
    for version in "$@"; do
        if ! wait "${pids[$i]}"; then
            echo "$engine $version: FAILED; the last lines of $root/$version.log:" >&2
            tail -n 15 "$root/$version.log" | sed 's/^/    /' >&2
            failed+=("$version")
        fi
        i=$((i + 1))
    done
    if [[ ${#failed[@]} -gt 0 ]]; then
        echo "install_$engine.sh: not prepared: ${failed[*]}" >&2
        return 1
    fi
}
