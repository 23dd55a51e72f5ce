#!/usr/bin/env bash
# packaging.deb: `cpack -G DEB` of the build tree makes
# switchyard_<version>_<arch>.deb holding the binaries, the client library
# (headers, static libraries, CMake package, switchyard.pc), the hardened
# systemd unit, the sysusers file and the default config, a conffile; its
# maintainer scripts are valid sh; and the switchyard-server it holds starts
# with the config it holds (listen and data-dir overridden on the command
# line to 127.0.0.1 port 0 and a temporary folder) and refuses that config
# with an unknown key added. The unit is checked with `systemd-analyze
# verify` where that exists.
#
#   deb_test.sh BUILD_DIR VERSION
set -euo pipefail
build=$1 version=$2

work=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/out" >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log" >&2; fail "cpack -G DEB"; }
deb=$work/out/switchyard_${version}_$(dpkg --print-architecture).deb
[[ -f $deb ]] || fail "no $(basename "$deb"); cpack made: $(ls "$work/out")"

# The files.
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$work/files"
expect() {  # expect REGEX: one path of the package matches it
  grep -qE "^$1\$" "$work/files" || fail "the package has no file matching $1"
}
for b in switchyard-server switchyard-cli switchyard-bench; do expect "/usr/bin/$b"; done
for h in client error gateway log; do expect "/usr/include/switchyard/$h\\.hpp"; done
expect '/usr/lib/(.*/)?libswitchyard_client\.a'
expect '/usr/lib/(.*/)?libswitchyard_protocol\.a'
expect '/usr/lib/(.*/)?cmake/switchyard/switchyardConfig\.cmake'
expect '/usr/lib/(.*/)?cmake/switchyard/switchyardConfigVersion\.cmake'
expect '/usr/lib/(.*/)?cmake/switchyard/switchyardTargets\.cmake'
expect '/usr/lib/(.*/)?pkgconfig/switchyard\.pc'
expect '/lib/systemd/system/switchyard\.service'
expect '/etc/switchyard/switchyard\.toml'
expect '/usr/lib/sysusers\.d/switchyard\.conf'

# The control part.
dpkg-deb -e "$deb" "$work/control"
grep -qx 'Package: switchyard' "$work/control/control" || fail "control: $(cat "$work/control/control")"
grep -qx "Version: $version" "$work/control/control" || fail "control: $(cat "$work/control/control")"
grep -qE '^Depends:.*adduser' "$work/control/control" || fail "control: no Depends on adduser"
grep -qx '/etc/switchyard/switchyard.toml' "$work/control/conffiles" || fail "the config is not a conffile"
for s in postinst prerm postrm; do
  [[ -x $work/control/$s ]] || fail "no executable maintainer script $s"
  sh -n "$work/control/$s" || fail "$s is not valid sh"
done
grep -q 'adduser --system' "$work/control/postinst" || fail "postinst creates no system user"

# The unit.
root=$work/root
dpkg-deb -x "$deb" "$root"
unit=$root/lib/systemd/system/switchyard.service
for line in 'User=switchyard' 'ExecStart=/usr/bin/switchyard-server --config /etc/switchyard/switchyard.toml' \
            'ExecReload=/bin/kill -HUP $MAINPID' 'Restart=on-failure' 'StateDirectory=switchyard' \
            'ProtectSystem=strict' 'ProtectHome=yes' 'NoNewPrivileges=yes' 'PrivateTmp=yes' \
            'ReadWritePaths=/var/lib/switchyard'; do
  grep -qxF "$line" "$unit" || fail "the unit has no line $line"
done
if command -v systemd-analyze >/dev/null; then
  # Offline: the unit as it would run from the extracted tree.
  mkdir "$work/units"
  sed "s|/usr/bin/switchyard-server|$root/usr/bin/switchyard-server|" "$unit" >"$work/units/switchyard.service"
  SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "$work/units/switchyard.service" >"$work/verify.log" 2>&1 ||
    { cat "$work/verify.log" >&2; fail "systemd-analyze verify switchyard.service"; }
  ! grep -i 'switchyard.service' "$work/verify.log" || fail "systemd-analyze verify warns about the unit"
fi

# The default config: the documented defaults, and accepted by the server.
config=$root/etc/switchyard/switchyard.toml
grep -qx 'listen = "127.0.0.1:7878"' "$config" || fail "the config does not listen on 127.0.0.1:7878"
grep -qx 'data-dir = "/var/lib/switchyard"' "$config" || fail "the config's data-dir is not /var/lib/switchyard"
server=$root/usr/bin/switchyard-server
"$server" --config "$config" --listen 127.0.0.1:0 --data-dir "$work/data" --port-file "$work/port" \
  >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do [[ -s $work/port ]] && break; kill -0 "$server_pid" 2>/dev/null || break; sleep 0.05; done
[[ -s $work/port ]] || { cat "$work/server.log" >&2; fail "switchyard-server did not start with the packaged config"; }
[[ -d $work/data/log ]] || fail "the server opened no sequence log in its data-dir"
kill -TERM "$server_pid"
status=0; wait "$server_pid" || status=$?; server_pid=
[[ $status == 0 ]] || { cat "$work/server.log" >&2; fail "switchyard-server exited $status after SIGTERM"; }

# The same check refuses a config with an unknown key (exit 2).
{ cat "$config"; echo 'no-such-setting = 1'; } >"$work/bad.toml"
status=0
timeout 30 "$server" --config "$work/bad.toml" --listen 127.0.0.1:0 --data-dir "$work/data" >"$work/bad.log" 2>&1 || status=$?
[[ $status == 2 ]] || fail "switchyard-server accepted a config with an unknown key (exit $status)"
echo "ok: $(basename "$deb")"
