# Sourced (not run) by bench's chart scripts: need_gnuplot_and_jq NAME makes
# sure gnuplot and jq are installed: as root it installs what is missing
# (Debian: gnuplot-nox, jq); otherwise it says how, naming the script NAME,
# and exits 2.
need_gnuplot_and_jq() {
  if command -v gnuplot >/dev/null 2>&1 && command -v jq >/dev/null 2>&1; then return 0; fi
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q gnuplot-nox jq >/dev/null
  else
    echo "$1: needs gnuplot and jq (apt-get install gnuplot-nox jq)" >&2
    exit 2
  fi
}
