#!/usr/bin/env bash
# Builds the Debian packages with dpkg-deb alone (no debhelper):
#
#   offline-agent_<version>_<arch>.deb    the device: /usr/bin/offline-agent, the systemd
#                                         units, /etc/offline-agent/agent.json (conffile),
#                                         logrotate, docs, man page
#   offline-publish_<version>_<arch>.deb  the operator: offline-publish and offline-server
#
#   scripts/package-deb.sh [--out DIR] [--bin-dir DIR] [--configuration release|debug]
#
# --out            where the .deb files go (default .build/deb); their paths are printed last.
# --bin-dir        use the binaries already there instead of running scripts/build-release.sh.
# --configuration  release (the default: scripts/build-release.sh, what ships) or debug:
#                  the debug objects `swift build --build-tests` already made, linked with
#                  the Swift runtime statically like the release build (a relink, not a
#                  second compile of every product). Packages the same files, unit, conffile
#                  and Depends:; scripts/test-deb.sh uses it, the shipped .deb never does.
#
# The version is AgentVersion.current (checked against the binaries' --version), the
# architecture `dpkg --print-architecture`, and Depends: is computed from the libraries
# each binary needs (objdump NEEDED -> the file ldd resolves -> dpkg -S -> the version
# from that package's shlibs). DEB_MAINTAINER sets the Maintainer: field;
# SOURCE_DATE_EPOCH (default: the last commit's time) dates the files and changelog.
# The packaging files (control, maintainer scripts) are in packaging/<package>/.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
export PATH="/opt/swift/usr/bin:$PATH"
umask 022

out=.build/deb
bin_dir=""
configuration=release
while (($#)); do
    case $1 in
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --bin-dir) bin_dir=${2:?--bin-dir needs a directory}; shift 2 ;;
    --configuration) configuration=${2:?--configuration needs release or debug}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 64 ;;
    esac
done
fail() { echo "package-deb: error: $*" >&2; exit 1; }
for tool in dpkg-deb dpkg objdump ldd strip strings gzip md5sum; do
    command -v "$tool" >/dev/null || fail "$tool is required"
done

[[ $configuration == release || $configuration == debug ]] ||
    { echo "error: --configuration is release or debug, not '$configuration'" >&2; exit 64; }
if [[ -z $bin_dir ]]; then
    # debug: the same link and checks as a release (static Swift runtime, dynamic libc and
    # C libraries, no ICU), so Depends: and the installed binaries are a release package's.
    scripts/build-release.sh --configuration "$configuration" offline-agent offline-publish offline-server
    # shellcheck disable=SC2086  # SWIFT_BUILD_FLAGS is a list of flags
    bin_dir=$(swift build -c "$configuration" ${SWIFT_BUILD_FLAGS:-} --show-bin-path)
fi
for tool in offline-agent offline-publish offline-server; do
    [[ -x $bin_dir/$tool ]] || fail "no $bin_dir/$tool (build it with scripts/build-release.sh)"
done

version=$(sed -n 's/^ *public static let current = "\([^"]*\)".*/\1/p' Sources/OfflineAgent/Agent/AgentVersion.swift)
[[ $version =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || fail "no usable version in Sources/OfflineAgent/Agent/AgentVersion.swift: '$version'"
for tool in offline-agent offline-publish; do
    built=$("$bin_dir/$tool" --version) || fail "$bin_dir/$tool --version failed"
    [[ $built == "$version" ]] || fail "$bin_dir/$tool is $built, the sources say $version: rebuild it"
done
arch=$(dpkg --print-architecture)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
maintainer=${DEB_MAINTAINER:-"offline-agent maintainers <offline-agent@packages.invalid>"}
[[ $maintainer =~ ^[^\<\>]+\ \<[^\<\>@\ ]+@[^\<\>@\ ]+\>$ ]] || fail "DEB_MAINTAINER must be 'Name <address>', not '$maintainer'"
for file in LICENSE NOTICE; do
    [[ -f $file ]] || fail "$file is missing at the repository root (the copyright file is made from it)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/package-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# The library packages a binary's NEEDED entries come from, with the minimum version
# their shlibs file asks for: what dpkg-shlibdeps does, without its source-package setup.
# offline-agent loads libzip with dlopen when it opens an archive (Sources/COfflineLibzip/include/clibzip.h),
# so it is no NEEDED entry. The sonames it tries are read from the binary itself (the
# strings clibzip.c passes to dlopen), and the lowest one this machine's loader knows is
# named, as clibzip.c tries the lowest first.
dlopened_by() {  # dlopened_by BINARY: the sonames BINARY loads itself, one per line
    local tried known
    tried=$(strings -n 8 "$1" | grep -xE 'libzip\.so\.[0-9]+' | sort -uV || true)
    [[ -n $tried ]] || return 0
    known=$(ldconfig -p | awk '{ print $1 }')
    grep -xF -m1 -f <(printf '%s\n' "$known") <<<"$tried" ||
        fail "$1 loads ${tried//$'\n'/ or }, which ldconfig does not know: apt-get install libzip4"
}

depends_of() {
    local binary=$1 needed soname path package shlibs name soversion dep
    local -a deps=()
    local dlopened
    dlopened=$(dlopened_by "$binary")
    # shellcheck disable=SC2086  # sonames: one word each
    for needed in $(objdump -p "$binary" | awk '$1 == "NEEDED" { print $2 }') $dlopened; do
        # "lib.so.N => /path (0x…)", or "/path/ld-linux….so.N (0x…)" for the loader itself;
        # a dlopen'ed library's path is the loader cache's.
        path=$(ldd "$binary" | awk -v lib="$needed" '$1 == lib && $2 == "=>" { print $3; exit }
            { n = split($1, part, "/") } n > 1 && part[n] == lib { print $1; exit }')
        [[ -n $path ]] || path=$(ldconfig -p | awk -v lib="$needed" '$1 == lib { print $NF; exit }')
        [[ -n $path && $path == /* ]] || fail "$binary needs $needed, which ldd does not resolve"
        package=""
        # usrmerge: dpkg may know the file under /lib or /usr/lib, or by its real path.
        for candidate in "$path" "/usr$path" "${path#/usr}" "$(realpath "$path")"; do
            package=$(dpkg -S "$candidate" 2>/dev/null | sed -n '1s/^\([^:,]*\).*/\1/p') && [[ -n $package ]] && break
        done
        [[ -n $package ]] || fail "$needed ($path) belongs to no installed Debian package"
        soname=$needed
        if [[ $soname =~ ^(.*)\.so\.(.*)$ ]]; then
            name=${BASH_REMATCH[1]} soversion=${BASH_REMATCH[2]}
        elif [[ $soname =~ ^(.*)-([0-9.]+)\.so$ ]]; then
            name=${BASH_REMATCH[1]} soversion=${BASH_REMATCH[2]}
        else
            name="" soversion=""
        fi
        dep=""
        for shlibs in "/var/lib/dpkg/info/$package:$arch.shlibs" "/var/lib/dpkg/info/$package.shlibs"; do
            [[ -f $shlibs && -n $name ]] || continue
            dep=$(awk -v n="$name" -v v="$soversion" '$1 !~ /:$/ && $1 == n && $2 == v { $1 = ""; $2 = ""; sub(/^ +/, ""); print; exit }' "$shlibs")
            [[ -n $dep ]] && break
        done
        deps+=("${dep:-$package}")
    done
    ((${#deps[@]})) || fail "$binary needs no shared library: is it the release build?"
    printf '%s\n' "${deps[@]}"
}

# Debian's strip (dh_strip's flags): symbols and the build notes go, Swift's metadata
# sections (allocated, read at run time) stay.
install_binary() {
    install -d "$(dirname "$2")"
    strip --remove-section=.comment --remove-section=.note --strip-unneeded -o "$2" "$1"
    chmod 755 "$2"
}

# A section 1 page from the tool's own --help (and its subcommands'), so `man` has
# something true to show; lintian wants a page for every command in /usr/bin.
man_page() {
    local tool=$1 binary=$2 page=$3 help overview subcommand
    help=$("$binary" --help) || fail "$binary --help failed"
    overview=$(sed -n 's/^OVERVIEW: //p' <<<"$help" | head -1 | sed 's/[.]$//')
    roff() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }
    {
        printf '.TH %s 1 "%s" "%s %s" "User Commands"\n' "${tool^^}" "$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)" "$tool" "$version"
        printf '.SH NAME\n%s \\- %s\n' "$tool" "$(roff <<<"${overview,}")"
        printf '.SH DESCRIPTION\n.nf\n'
        roff <<<"$help"
        printf '.fi\n'
        # ArgumentParser lists subcommands two spaces in, one per line, under SUBCOMMANDS:.
        local -a subcommands=()
        mapfile -t subcommands < <(sed -n '/^SUBCOMMANDS:/,/^$/{s/^  \([a-z][a-z0-9-]*\)\( .*\)\{0,1\}$/\1/p}' <<<"$help")
        if ((${#subcommands[@]})); then
            printf '.SH COMMANDS\n'
            for subcommand in "${subcommands[@]}"; do
                printf '.SS %s\n.nf\n' "$subcommand"
                "$binary" help "$subcommand" | roff || fail "$binary help $subcommand failed"
                printf '.fi\n'
            done
        fi
        printf '.SH SEE ALSO\nThe wire protocol: /usr/share/doc/%s/PROTOCOL.md.gz\n' "$package_name"
    } | gzip -9n >"$page"
}

# DEP-5 copyright: the project's licence (LICENSE) for everything, and NOTICE (what is
# vendored or adapted, and what the binaries link statically) as the header comment.
copyright() {
    local license_name license_body
    if grep -q 'Apache License' LICENSE && grep -q 'Version 2.0' LICENSE; then
        license_name=Apache-2.0
        license_body=" On Debian systems, the full text of the Apache License, Version 2.0, is in
 /usr/share/common-licenses/Apache-2.0."
    else
        if grep -qi 'Permission is hereby granted, free of charge' LICENSE; then
            license_name=Expat
        elif grep -q 'Redistribution and use in source and binary forms' LICENSE; then
            license_name=BSD-2-Clause
            grep -q 'endorse or promote' LICENSE && license_name=BSD-3-Clause
        else
            license_name=custom
        fi
        license_body=$(field_text <LICENSE)
    fi
    local holder zlib
    holder=$(grep -m1 -i '^ *copyright' LICENSE | sed 's/^ *[Cc]opyright *\((c)\|©\)\{0,1\} *//') || true
    # A vendored zlib (swift-nio-extras' CNIOExtrasZlib) announces itself like this.
    zlib=$(cat "$1"/usr/bin/* | strings -a | grep -m1 -o 'deflate [0-9][0-9.]* Copyright [0-9-]* Jean-loup Gailly and Mark Adler') || true
    cat <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: offline-agent
Comment: The binaries link the Swift runtime, Foundation and these Swift packages
 statically (Apache-2.0 with the Runtime Library Exception; swift-crypto embeds
 BoringSSL, under the OpenSSL and ISC licences):
$(sed -n 's/.*\.package(url: "\([^"]*\)".*/ \1/p' Package.swift
  [[ -z $zlib ]] || printf ' .\n They include a copy of zlib (%s,\n Zlib licence), in swift-nio-extras.\n' "$zlib")
 .
 NOTICE:
 .
$(field_text <NOTICE)

Files: *
Copyright: ${holder:-the offline-agent authors}
License: $license_name

License: $license_name
$license_body
EOF
}
# Text as the continuation lines of a deb822 field: one space in, blank lines as " .".
field_text() { sed -e 's/[[:space:]]*$//' -e 's/^$/./' -e 's/^/ /'; }

changelog() {
    cat <<EOF | gzip -9n
$1 ($version) unstable; urgency=medium

  * Release $version$(git rev-parse --short HEAD 2>/dev/null | sed 's/.*/ (git &)/').
    The changes are in the project's git history.

 -- $maintainer  $(date -u -R -d "@$SOURCE_DATE_EPOCH")
EOF
}

# Everything every package has: copyright, changelog, man pages, md5sums, control.
finish_package() {
    local root=$1 doc="$1/usr/share/doc/$package_name" binary
    install -d "$doc"
    copyright "$root" >"$doc/copyright"
    changelog "$package_name" >"$doc/changelog.gz"
    install -d "$root/usr/share/man/man1"
    for binary in "$root"/usr/bin/*; do
        man_page "$(basename "$binary")" "$binary" "$root/usr/share/man/man1/$(basename "$binary").1.gz"
    done
    # Policy 12.3: documentation over 4 kB is compressed.
    find "$doc" -type f ! -name copyright ! -name '*.gz' -size +4k -exec gzip -9n {} +

    local debian="$root/DEBIAN" depends
    # Lintian tags judged not to apply, each with its reason in the file.
    if [[ -f packaging/$package_name/lintian-overrides ]]; then
        install -D -m 644 "packaging/$package_name/lintian-overrides" "$root/usr/share/lintian/overrides/$package_name"
    fi
    install -d "$debian"
    local -a conffiles=()
    if [[ -d $root/etc ]]; then
        mapfile -t conffiles < <(cd "$root" && find etc -type f | sed 's#^#/#' | sort)
    fi
    if ((${#conffiles[@]})); then
        printf '%s\n' "${conffiles[@]}" >"$debian/conffiles"
    fi
    # md5sums of every shipped file but the conffiles (dpkg keeps theirs itself).
    (cd "$root" && find . -path ./DEBIAN -prune -o -type f -print | sed 's#^\./##' | LC_ALL=C sort |
        grep -vxF -f <(printf '%s\n' "${conffiles[@]}" | sed 's#^/##'; echo DEBIAN) | xargs -r -d '\n' md5sum) >"$debian/md5sums"
    depends=$(for binary in "$root"/usr/bin/*; do depends_of "$binary"; done | LC_ALL=C sort -u | paste -sd, - | sed 's/,/, /g')
    local size
    size=$(du -sk --apparent-size --exclude=DEBIAN "$root" | cut -f1)
    sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@MAINTAINER@/$maintainer/" \
        -e "s/@INSTALLED_SIZE@/$size/" -e "s/@DEPENDS@/$depends/" \
        "packaging/$package_name/control" >"$debian/control"
    ! grep -q '@[A-Z_]*@' "$debian/control" || fail "packaging/$package_name/control: unknown placeholder"
    local script
    for script in preinst postinst prerm postrm; do
        [[ -f "$debian/$script" ]] && chmod 755 "$debian/$script"
    done
    find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
    local deb="$out/${package_name}_${version}_${arch}.deb"
    # xz for what ships; DEB_COMPRESSION=gzip DEB_COMPRESSION_LEVEL=1 lets the test skip
    # minutes of xz on debug binaries (the packaging checked is the same).
    dpkg-deb --root-owner-group -Z"${DEB_COMPRESSION:-xz}" ${DEB_COMPRESSION_LEVEL:+-z"$DEB_COMPRESSION_LEVEL"} --build "$root" "$deb" >/dev/null
    debs+=("$deb")
}
debs=()

# MARK: offline-agent

package_name=offline-agent
root="$work/$package_name"
install_binary "$bin_dir/offline-agent" "$root/usr/bin/offline-agent"
# The example units and crontab name /usr/local/bin (a manual install); the package's is /usr/bin.
units="$root/usr/lib/systemd/system"
install -d "$units" "$root/usr/share/doc/$package_name/examples"
for unit in examples/systemd/*.service examples/systemd/*.timer; do
    sed 's#/usr/local/bin/offline-agent#/usr/bin/offline-agent#g' "$unit" >"$units/$(basename "$unit")"
    chmod 644 "$units/$(basename "$unit")"
done
# The D-Bus service (docs/DBUS.md): the bus policy, the activation file, the interfaces,
# and the static user the policy names (created by postinst with systemd-sysusers).
install -D -m 644 packaging/offline-agent/dbus/org.offlineagent.Agent1.conf "$root/usr/share/dbus-1/system.d/org.offlineagent.Agent1.conf"
install -D -m 644 packaging/offline-agent/dbus/org.offlineagent.Agent1.service "$root/usr/share/dbus-1/system-services/org.offlineagent.Agent1.service"
install -D -m 644 docs/dbus/org.offlineagent.Agent1.xml "$root/usr/share/dbus-1/interfaces/org.offlineagent.Agent1.xml"
install -D -m 644 packaging/offline-agent/dbus/offline-agent.sysusers "$root/usr/lib/sysusers.d/offline-agent.conf"
sed 's#/usr/local/bin/offline-agent#/usr/bin/offline-agent#g' examples/crontab >"$root/usr/share/doc/$package_name/examples/crontab"
if grep -n '/usr/local/' "$units"/* "$root/usr/share/doc/$package_name/examples/crontab"; then
    fail "a unit or the crontab still names /usr/local (above): the package installs to /usr"
fi
grep -h '^ExecStart=' "$units"/*.service | grep -v '^ExecStart=/usr/bin/offline-agent ' &&
    fail "a unit runs something other than /usr/bin/offline-agent (above)"
install -D -m 644 examples/agent.json "$root/etc/offline-agent/agent.json"
install -D -m 644 examples/logrotate/offline-agent "$root/etc/logrotate.d/offline-agent"
grep -q -- '--config /etc/offline-agent/agent.json' "$units/offline-agent-sync.service" ||
    fail "offline-agent-sync.service does not read /etc/offline-agent/agent.json, the installed config"
install -m 644 README.md docs/PROTOCOL.md "$root/usr/share/doc/$package_name/"
install -d "$root/DEBIAN"
install -m 755 packaging/$package_name/postinst packaging/$package_name/prerm "$root/DEBIAN/"
# postrm removes what `systemctl enable` makes: WANTS.wants/UNIT for each WantedBy=.
links=$(cd "$units" && for unit in *; do
    sed -n 's/^WantedBy=//p' "$unit" | tr ' ' '\n' | sed -n "/./s#\$#.wants/$unit#p"
    sed -n 's/^RequiredBy=//p' "$unit" | tr ' ' '\n' | sed -n "/./s#\$#.requires/$unit#p"
done | paste -sd' ' -)
[[ -n $links ]] || fail "no unit has a WantedBy= (postrm would leave enabled units' links)"
sed "s#@ENABLE_LINKS@#$links#" packaging/$package_name/postrm >"$root/DEBIAN/postrm"
finish_package "$root"

# MARK: offline-publish

package_name=offline-publish
root="$work/$package_name"
install_binary "$bin_dir/offline-publish" "$root/usr/bin/offline-publish"
install_binary "$bin_dir/offline-server" "$root/usr/bin/offline-server"
install -d "$root/usr/share/doc/$package_name"
install -m 644 README.md docs/PROTOCOL.md "$root/usr/share/doc/$package_name/"
finish_package "$root"

printf '%s\n' "${debs[@]}"
