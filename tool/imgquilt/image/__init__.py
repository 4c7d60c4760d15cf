"""Container images, laid out as the bytes flow.

    reference.py   which transport a reference names; opens it as a model.Image
    sources/       one module per transport (oci layout, oci-archive, docker-archive, dir, flat tar,
                   skopeo copy) and what they share (index/manifest reading, archive member index)
    layers/        a layer's bytes: blob readers and their digests, compression, the tar walk,
                   the per-layer index and the merged view of all layers
    image_source.py  an image as a filesystem Source (targets read through layers/)
    sinks/         where a new layer goes: a layer file, an image (mutate.append, then a layout or
                   an archive writer), a bind-mount overlay
    model.py, mediatypes.py, digests.py   the values, media types and digest checks all of them share

Opening a reference that may be a root filesystem is the verbs' job (imgquilt.sources).
"""
