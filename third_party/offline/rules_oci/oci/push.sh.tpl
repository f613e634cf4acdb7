#!/usr/bin/env bash
# Pushes an OCI layout with skopeo: by digest first, then each tag. As rules_oci's
# push script (v2.2.7, oci/private/push.sh.tpl) does, the tags are those given
# with --tag followed by the rule's remote_tags: a --tag adds, never replaces.
#   bazel run //serving:push_tpu_image -- [--repository=HOST/PATH] [--tag=TAG ...]
# TLS is verified except for a registry on localhost/127.0.0.1.
set -euo pipefail

repository="{{repository}}"
remote_tags=({{tags}})
tags=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --repository=*) repository="${1#*=}" ;;
    --repository) repository="${2:?--repository needs a value}"; shift ;;
    --tag=*) tags+=("${1#*=}") ;;
    --tag) tags+=("${2:?--tag needs a value}"); shift ;;
    *) echo "error: unknown argument $1 (expected --repository=HOST/PATH, --tag=TAG)" >&2; exit 1 ;;
  esac
  shift
done
tags+=(${remote_tags[@]+"${remote_tags[@]}"})
if [[ -z "$repository" ]]; then
  echo "error: no repository to push to: pass --repository=HOST/PATH" \
    "(e.g. --repository=us-docker.pkg.dev/PROJECT/REPO/IMAGE)" >&2
  exit 1
fi

# `bazel run` starts us in our runfiles tree; run directly, it lies next to us.
runfiles="$0.runfiles/{{workspace}}"
[[ -d "$runfiles" ]] || runfiles="$PWD"
layout="$runfiles/{{layout}}"
digest="$(cat "$runfiles/{{digest}}")"

if ! command -v skopeo >/dev/null 2>&1; then
  echo "error: skopeo is not installed (Debian: apt-get install skopeo)" >&2
  exit 1
fi
tls=()
case "${repository%%/*}" in
  localhost|localhost:*|127.0.0.1|127.0.0.1:*) tls=(--dest-tls-verify=false) ;;
  *)
    # An offline image is a stand-in: it exercises the build and the push only.
    echo "error: not pushing to $repository: this image was built offline (Bazel 4.2.3," \
      "./bazelw) on a stand-in base without its wheels, so it cannot run on a TPU or GPU;" \
      "build and push it with Bazel 7+ online (bazelisk: bazel run ${0##*/}), or push to a" \
      "localhost registry to try the push" >&2
    exit 1 ;;
esac

echo "pushing $repository@$digest" >&2
skopeo copy --quiet --preserve-digests ${tls[@]+"${tls[@]}"} "oci:$layout" "docker://$repository@$digest"
for tag in ${tags[@]+"${tags[@]}"}; do
  skopeo copy --quiet --preserve-digests ${tls[@]+"${tls[@]}"} "oci:$layout" "docker://$repository:$tag"
  echo "tagged $repository:$tag" >&2
done
echo "$repository@$digest"
