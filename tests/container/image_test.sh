#!/usr/bin/env bash
# ContainerImage: deploy/container/build-image.sh builds the image from this
# checkout (the fixture the other container tests use, as localhost/geodesic:test);
# the image runs the binary as a non-root user with every library it loads,
# holds the dataset, and holds no compiler, headers or package manager front end.
source "$(dirname "$0")/lib.sh"

"$SRC/deploy/container/build-image.sh" --tag "$IMAGE" 2>&1 | tee "$WORK/build.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail "build-image.sh failed"

run() { podman run --rm --network none "$@"; }
run "$IMAGE" --version | grep -q geodesic || fail "the image's entry point does not run geodesic --version"
[[ $(run --entrypoint /usr/bin/id "$IMAGE" -u) == 10001 ]] || fail "the image does not run as user 10001"
run --entrypoint /usr/bin/ldd "$IMAGE" /usr/local/bin/geodesic > "$WORK/ldd"
! grep -q 'not found' "$WORK/ldd" || fail "libraries missing from the image: $(grep 'not found' "$WORK/ldd")"
run --entrypoint /bin/ls "$IMAGE" /usr/share/datasets/fashion-mnist | grep -q 't10k-images-idx3-ubyte' ||
  fail "the dataset is not in the image"
for absent in /usr/bin/g++ /usr/bin/cmake /usr/bin/apt-get /usr/include/torch /usr/include/zmq.h; do
  run --entrypoint /bin/sh "$IMAGE" -c "test ! -e $absent" || fail "the runtime image holds $absent"
done
# The image runs a real (small) training job on its own dataset, as that user.
run -v "$SRC/examples:/examples:ro" "$IMAGE" launch /examples/fashion_mnist.yaml --run-dir /var/lib/geodesic/run \
  --quiet --no-dashboard --no-metrics --set model.name=mlp --set training.steps=200 > "$WORK/launch.log" 2>&1 || fail "launch in the image: $(tail -5 "$WORK/launch.log")"
grep -q 'finished: test accuracy' "$WORK/launch.log" || fail "no final accuracy: $(tail -5 "$WORK/launch.log")"
echo "PASS: $(grep 'is [0-9]* MB' "$WORK/build.log"); $(grep 'finished:' "$WORK/launch.log")"
