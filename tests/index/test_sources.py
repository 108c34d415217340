"""What an index is built over, image by image: an image bomb is refused from its header, before any decoding."""

import struct
import zlib

from kitm.index.sources import MAX_IMAGE_PIXELS, prepare_image


def _png_header(width: int, height: int) -> bytes:
    """A few dozen bytes of PNG that declare `width` x `height` pixels (its pixel data is a stub: a decoder that
    tried to read it would find it damaged)."""
    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def test_an_image_bomb_is_refused_from_its_header_before_it_is_decoded():
    assert MAX_IMAGE_PIXELS == 40_000_000
    prepared = prepare_image(_png_header(12000, 12000))
    # Refused as too large, not as damaged: its stub pixel data was never read.
    assert prepared.too_large and prepared.model_bytes is None and prepared.thumbnail is None
    assert prepared.error == ("too large: 12000 x 12000 pixels (144 MP) where at most 40 MP are decoded "
                              "(kitm.index.sources.MAX_IMAGE_PIXELS); scale it down")
    # 400 MP is past Pillow's own limit, which raised DecompressionBombError: the same refusal.
    prepared = prepare_image(_png_header(20000, 20000))
    assert prepared.too_large and prepared.error.startswith("too large (400 MP): at most 40 MP are decoded")
    # Within the limit, the header passes and the (stub) pixel data is read: a damaged image, not too large.
    prepared = prepare_image(_png_header(200, 100))
    assert not prepared.too_large and prepared.error.startswith("a damaged image")
