# Checks of the env-var knobs, shared by every script under recipes/ (sourced, never run directly). A bad knob stops
# the script before it starts or creates anything, with one line naming the knob, its value and the valid values.

_knob_die() {
  echo "$(basename "$0"): $*" >&2
  exit 2
}

# knob_flag NAME [WHAT]: NAME unset or empty is off; 1, true or yes (any case) is on; any other value is refused, 0 and
# false included (a word a user might read as "off" must not start a multi-day run by accident). Afterwards NAME is 1
# or empty (what a script it starts reads the same way). WHAT says what the flag does, for the refusal.
knob_flag() {
  local name=$1 value=${!1:-}
  case "${value,,}" in
    "") printf -v "$name" '' ;;
    1 | true | yes) printf -v "$name" 1 ;;
    *) _knob_die "$name='$value' is not understood: set $name=1 (or true, yes)${2:+ $2}, or leave $name unset" ;;
  esac
}

# knob_dry_run: DRY_RUN=1 prints the exact command and starts and creates nothing (knob_flag).
knob_dry_run() {
  knob_flag DRY_RUN "to print the command without running it"
}

# knob_choice NAME CHOICE...: the knob NAME must hold one of the choices.
knob_choice() {
  local name=$1 choice
  shift
  for choice in "$@"; do
    [[ "${!name}" == "$choice" ]] && return 0
  done
  _knob_die "$name='${!name}' is not one of: $*"
}

# knob_positive_int NAME...: each knob must be a whole number of at least 1.
knob_positive_int() {
  local name
  for name in "$@"; do
    [[ "${!name}" =~ ^[1-9][0-9]*$ ]] || _knob_die "$name='${!name}' must be a whole number of at least 1"
  done
}

# knob_renamed OLD NEW [OLD NEW]...: a knob of an earlier version that is still set is refused with its new name, so a
# renamed knob is never silently ignored (MODEL_PATH=... would otherwise train the default model).
knob_renamed() {
  while (($# >= 2)); do
    [[ -z "${!1:-}" ]] || _knob_die "$1 was renamed $2: set $2=${!1} (and unset $1)"
    shift 2
  done
}

# knob_reachable_url NAME...: with NNODES > 1, each URL knob must name a host every node reaches. A loopback or
# wildcard address (localhost, 127.x, ::1, 0.0.0.0) would send each node's workers to a service on their own node.
knob_reachable_url() {
  local name host
  ((NNODES > 1)) || return 0
  for name in "$@"; do
    host=${!name#*://}
    host=${host%%/*}
    host=${host##*@}
    case "$host" in
      \[*) host=${host#[} host=${host%%]*} ;;
      *) host=${host%%:*} ;;
    esac
    case "${host,,}" in
      "" | localhost | 127.* | ::1 | 0.0.0.0)
        _knob_die "$name=${!name} points at this machine, but NNODES=$NNODES: the workers on the other nodes would call their own node; set $name to an address every node reaches (the service host's IP or DNS name)"
        ;;
    esac
  done
}
