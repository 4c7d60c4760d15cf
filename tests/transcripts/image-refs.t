# Issue 18, point 6: a bare name:tag or an unknown transport gets imgquilt's own message.
$ imgquilt apply --image python:3.11
imgquilt: Image reference 'python:3.11' names no transport imgquilt knows ('python:' is none) and no file or directory 'python' here. A reference is one of oci:DIR[:TAG|@DIGEST], oci-archive:FILE[:TAG], docker-archive:FILE[:REPO:TAG], dir:DIR, tar:FILE, rootfs:DIR, docker://HOST/REPO[:TAG|@DIGEST], containers-storage:NAME[:TAG], docker-daemon:NAME:TAG, or a path.
For an image in a registry: --image docker://python:3.11 (Docker Hub's official images: docker://docker.io/library/python:3.11).
[exit 6]

$ imgquilt apply --image img:v1
imgquilt: Image reference 'img:v1' names no transport imgquilt knows ('img:' is none) and no file or directory 'img' here. A reference is one of oci:DIR[:TAG|@DIGEST], oci-archive:FILE[:TAG], docker-archive:FILE[:REPO:TAG], dir:DIR, tar:FILE, rootfs:DIR, docker://HOST/REPO[:TAG|@DIGEST], containers-storage:NAME[:TAG], docker-daemon:NAME:TAG, or a path.
For an image in a registry: --image docker://img:v1 (Docker Hub's official images: docker://docker.io/library/img:v1).
[exit 6]

$ imgquilt audit --image ubuntu
imgquilt: Image reference 'ubuntu' is no transport and no file or directory here. A reference is one of oci:DIR[:TAG|@DIGEST], oci-archive:FILE[:TAG], docker-archive:FILE[:REPO:TAG], dir:DIR, tar:FILE, rootfs:DIR, docker://HOST/REPO[:TAG|@DIGEST], containers-storage:NAME[:TAG], docker-daemon:NAME:TAG, or a path.
For an image in a registry: --image docker://ubuntu (Docker Hub's official images: docker://docker.io/library/ubuntu).
[exit 6]

# point 10: a digest cut short is said to be one, not a missing layout
$ imgquilt apply --image oci:examples/demo-image@sha256:abc
imgquilt: Image reference digest 'sha256:abc' is not a whole digest (sha256: and 64 lowercase hex digits).
Copy the whole digest (e.g. from `skopeo inspect oci:examples/demo-image`), or name a tag instead.
[exit 6]
