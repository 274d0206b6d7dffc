#!/usr/bin/env bash
# Builds the Debian package (target/debian/spillway_<version>_<arch>.deb) with cargo-deb and
# checks what it holds. Needs what scripts/setup.sh installs (cargo-deb).
#
#   scripts/package.sh            build the release binary and the .deb, check its contents
#   scripts/package.sh --install  also install it on this machine (as root), check the installed
#                                 config with the installed binary, the user, the unit; then
#                                 remove it again (purge), leaving the machine as it was
set -euo pipefail
cd "$(dirname "$0")/.."

install=false
[ "${1:-}" = "--install" ] && install=true

# The package has Iceberg tables (the feature `iceberg`; the README's first run leaves it out).
cargo build --release --locked -p spillway --bin spillway --features iceberg
SPILLWAY_IGGY_PASSWORD=x AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x \
    target/release/spillway check --config examples/iggy-to-iceberg.toml >/dev/null ||
    { echo "package: the release binary refuses the Iceberg example (built without the feature?)" >&2; exit 1; }
rm -rf target/debian
cargo deb -p spillway --no-build --locked --output target/debian/
deb=$(ls target/debian/*.deb)
echo "package: $deb"

fail() {
    echo "package: $*" >&2
    exit 1
}

# The files, as the package lists them.
contents=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|')
echo "$contents"
for path in \
    /usr/bin/spillway \
    /lib/systemd/system/spillway.service \
    /etc/spillway/spillway.toml \
    /usr/share/doc/spillway/README.md \
    /usr/share/doc/spillway/tuning.md \
    /usr/share/doc/spillway/architecture.md \
    /usr/share/doc/spillway/examples/iggy-to-mqtt.toml \
    /usr/share/doc/spillway/examples/iggy-to-s3.toml \
    /usr/share/doc/spillway/copyright; do
    grep -qx "$path" <<<"$contents" || fail "$path is not in the package"
done
# Every example config goes in.
for f in examples/*.toml; do
    grep -qx "/usr/share/doc/spillway/examples/$(basename "$f")" <<<"$contents" \
        || fail "examples/$(basename "$f") is not in the package"
done

# Modes: the binary executable, the config not world-readable (it may hold a password).
modes=$(dpkg-deb -c "$deb")
grep -E ' \./usr/bin/spillway$' <<<"$modes" | grep -q '^-rwxr-xr-x' || fail "/usr/bin/spillway is not 0755"
grep -E ' \./etc/spillway/spillway.toml$' <<<"$modes" | grep -q '^-rw-r-----' || fail "/etc/spillway/spillway.toml is not 0640"

# Control data: the config is a conffile (kept on upgrade when edited), the scripts are in.
ctl=$(mktemp -d)
trap 'rm -rf "$ctl"' EXIT
dpkg-deb -e "$deb" "$ctl"
grep -qx /etc/spillway/spillway.toml "$ctl/conffiles" || fail "the config is not a conffile"
for s in postinst prerm postrm; do
    [ -x "$ctl/$s" ] || fail "no $s script"
done
grep -q '^Depends:.*adduser' "$ctl/control" || fail "no dependency on adduser"
grep -q '^Package: spillway$' "$ctl/control" || fail "the package is not named spillway"

# The unit, and the binary and config it names, as extracted from the package.
root="$ctl/root"
dpkg-deb -x "$deb" "$root"
"$root/usr/bin/spillway" --version
if command -v systemd-analyze >/dev/null 2>&1; then
    # Verified against this machine's systemd, with the unit's binary taken from the package.
    mkdir -p "$ctl/unit"
    sed "s|/usr/bin/spillway|$root/usr/bin/spillway|g" "$root/lib/systemd/system/spillway.service" \
        >"$ctl/unit/spillway.service"
    systemd-analyze verify --man=no "$ctl/unit/spillway.service" \
        || fail "systemd-analyze verify refused the unit"
fi
"$root/usr/bin/spillway" check --config "$root/etc/spillway/spillway.toml" >/dev/null \
    || fail "the packaged config does not pass spillway check"

if $install; then
    [ "$(id -u)" -eq 0 ] || fail "--install needs root"
    if dpkg-query -W -f='${Status}' spillway 2>/dev/null | grep -q "install ok installed"; then
        echo "package: spillway is installed on this machine already: not installing over it"
        echo "package: $deb checked"
        exit 0
    fi
    DEBIAN_FRONTEND=noninteractive dpkg -i "$deb"
    getent passwd spillway >/dev/null || fail "postinst made no spillway user"
    [ "$(stat -c '%G %a' /etc/spillway/spillway.toml)" = "spillway 640" ] \
        || fail "the installed config is not spillway:0640"
    /usr/bin/spillway check --config /etc/spillway/spillway.toml >/dev/null \
        || fail "the installed config does not pass spillway check"
    dpkg -L spillway | grep -qx /lib/systemd/system/spillway.service || fail "dpkg does not list the unit"
    DEBIAN_FRONTEND=noninteractive dpkg --purge spillway
    [ ! -e /usr/bin/spillway ] || fail "purge left /usr/bin/spillway"
    [ ! -e /etc/spillway/spillway.toml ] || fail "purge left the config"
    echo "package: installed, checked and purged again"
fi
echo "package: $deb checked"
