"""What a set too small to measure cannot tell: the warnings kitm.eval prints beside its figures."""

from __future__ import annotations


# Below this many images a split's figures move by several points from one draw of the split to another; the
# benchmarks report 1,000 (Flickr, COCO 1K) or 5,000 images.
SMALL_SET_IMAGES = 100


def small_set_warnings(num_images: int, num_captions: int, captions_per_image: int, ks, *, include_gt: bool = False,
                       with_relevance: bool = True) -> list[str]:
    """What a set this small cannot measure, one sentence each: R@K and NCS@K where K reaches every candidate a
    query ranks (R@K is then 100 and NCS@K 100 or 0 whatever the model: a 2-image split printed NCS 0.00), and a
    note below `SMALL_SET_IMAGES` images."""
    notes = []
    if num_images < SMALL_SET_IMAGES:
        notes.append(f"the set scored has {num_images} image(s) and {num_captions} caption(s): its figures vary by "
                     f"several points from one split to another (the benchmarks score 1,000 or 5,000 images); "
                     f"compare runs on {SMALL_SET_IMAGES} images or more (--test_images when building).")
    full = [k for k in ks if k >= num_images]
    if full:
        notes.append(f"R@{','.join(map(str, full))} (t2i): a caption query ranks {num_images} image(s), so K = "
                     f"{full[0]} retrieves them all and the figure is 100 whatever the model.")
    if with_relevance:
        t2i_left = num_images - (0 if include_gt else 1)
        i2t_left = num_captions - (0 if include_gt else captions_per_image)
        removed = "" if include_gt else " once its ground truth is removed"
        for direction, left, what in (("t2i", t2i_left, "a caption query ranks {} image(s)"),
                                      ("i2t", i2t_left, "an image query ranks {} caption(s)")):
            blind = [k for k in ks if k >= left]
            if blind:
                notes.append(f"NCS@{','.join(map(str, blind))} ({direction}): {what.format(left)}{removed}, so K = "
                             f"{blind[0]} retrieves them all in any order and NCS is 100, or 0 where their relevance "
                             "is 0, whatever the model: it measures nothing here.")
    return notes
