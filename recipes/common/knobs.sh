# Checks of the env-var knobs, shared by every script under recipes/ (sourced, never run directly). A bad knob stops
# the script before it starts or creates anything, with one line naming the knob, its value and the valid values.

_knob_die() {
  echo "$(basename "$0"): $*" >&2
  exit 2
}

# knob_dry_run: DRY_RUN unset or empty runs; 1, true or yes (any case) prints the exact command and starts and creates
# nothing; any other value is refused (DRY_RUN=false or DRY_RUN=0 must not silently start a multi-day run either).
# Afterwards DRY_RUN is 1 or empty (what a script it starts reads the same way).
knob_dry_run() {
  case "${DRY_RUN:-}" in
    "") DRY_RUN= ;;
    *)
      case "${DRY_RUN,,}" in
        1 | true | yes) DRY_RUN=1 ;;
        *) _knob_die "DRY_RUN='$DRY_RUN' is not understood: set DRY_RUN=1 (or true, yes) to print the command without running it, or leave DRY_RUN unset to run" ;;
      esac
      ;;
  esac
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
