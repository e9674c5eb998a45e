#!/usr/bin/env bash
# image-rootfs.sh DIR BINARY: lays out lifeboat's container root filesystem
# in DIR, the same for `make image` (scripts/image builds the OCI image from
# it) and for the Dockerfile (which copies it onto scratch):
#   /lifeboat                          the static binary
#   /etc/passwd, /etc/group            root and nonroot (65532), no shell
#   /etc/ssl/certs/ca-certificates.crt Debian's ca-certificates (Mozilla's roots)
#   /usr/share/zoneinfo/               Debian's tzdata (retention.time_zone, CRON_TZ)
#   /var/lib/lifeboat/{spool,scratch}  0700, the defaults of snapshot.spool_dir
#                                      and drill.scratch_dir (owned by 65532 in the image)
#   /home/nonroot (0700), /tmp (1777)
# CA roots and zones come from the machine's Debian packages
# (apt-get install ca-certificates tzdata), never from a base image.
set -euo pipefail
dir=$1
bin=$2
ca=/usr/share/ca-certificates/mozilla
zones=/usr/share/zoneinfo
[ -d "$ca" ] && [ -d "$zones" ] || {
	echo "image-rootfs.sh: needs Debian's ca-certificates and tzdata ($ca, $zones): apt-get install ca-certificates tzdata" >&2
	exit 1
}
rm -rf "$dir"
mkdir -p "$dir/etc/ssl/certs" "$dir/usr/share" "$dir/var/lib/lifeboat/spool" \
	"$dir/var/lib/lifeboat/scratch" "$dir/home/nonroot" "$dir/tmp"
install -m 0755 "$bin" "$dir/lifeboat"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$dir/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$dir/etc/group"
# The bundle update-ca-certificates would make from the package alone
# (no local additions), in a stable order.
LC_ALL=C find "$ca" -name '*.crt' | LC_ALL=C sort | xargs cat >"$dir/etc/ssl/certs/ca-certificates.crt"
# The zones without the right/ (leap seconds) and posix/ copies.
cp -a "$zones" "$dir/usr/share/zoneinfo"
rm -rf "$dir/usr/share/zoneinfo/right" "$dir/usr/share/zoneinfo/posix" "$dir/usr/share/zoneinfo/posixrules"
chmod 0644 "$dir/etc/passwd" "$dir/etc/group" "$dir/etc/ssl/certs/ca-certificates.crt"
chmod 0700 "$dir/var/lib/lifeboat" "$dir/var/lib/lifeboat/spool" "$dir/var/lib/lifeboat/scratch" "$dir/home/nonroot"
chmod 1777 "$dir/tmp"
