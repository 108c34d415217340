"""kitm.data.coco_captions: COCO caption files in Karpathy's split, the first five captions by annotation id, and
bad input named."""

import json

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
from kitm.data import schema
from kitm.data.build import main
from kitm.data.coco_captions import build_coco_captions
from kitm.data.synthetic_records import encode_png
from kitm.errors import KitmDataError


def _coco(tmp_path, captions_per_image, splits):
    """captions_train2014.json / captions_val2014.json, dataset_coco.json and tiny PNGs (named .jpg as in COCO)."""
    images_dir = tmp_path / "coco"
    files = {"train2014": {"images": [], "annotations": []}, "val2014": {"images": [], "annotations": []}}
    karpathy = []
    rng = np.random.default_rng(0)
    annotation_id = 1000
    for image_id, (count, split) in enumerate(zip(captions_per_image, splits), start=1):
        folder = "train2014" if image_id % 2 else "val2014"
        name = f"COCO_{folder}_{image_id:012d}.jpg"
        (images_dir / folder).mkdir(parents=True, exist_ok=True)
        (images_dir / folder / name).write_bytes(encode_png(np.full((6, 8, 3), image_id, np.uint8)))
        files[folder]["images"].append({"id": image_id, "file_name": name, "width": 8, "height": 6})
        ids = annotation_id + rng.permutation(count) * 7  # annotation ids out of file order
        annotation_id += 100
        for k, identifier in enumerate(ids):
            files[folder]["annotations"].append(
                {"id": int(identifier), "image_id": image_id, "caption": f"a photo {image_id} with id {identifier}"})
        if split is not None:
            karpathy.append({"filename": name, "filepath": folder, "split": split, "imgid": image_id})
    paths = []
    for folder, content in files.items():
        paths.append(tmp_path / f"captions_{folder}.json")
        paths[-1].write_text(json.dumps(content))
    (tmp_path / "dataset_coco.json").write_text(json.dumps({"images": karpathy, "dataset": "coco"}))
    return paths, tmp_path / "dataset_coco.json", images_dir


def test_coco_captions_keep_the_first_five_by_annotation_id_in_karpathy_order(tmp_path, capsys, split_records):
    paths, karpathy, images = _coco(tmp_path, [5, 7, 5, 6, 5, 5, 5], ["train", "restval", "train", "val", "test",
                                                                      "train", None])
    info = build_coco_captions(tmp_path / "out", paths, karpathy, images, num_shards=2, relevance=("cider",),
                               progress=False)
    assert {split: info.num_images(split) for split in info.splits} == {"train": 4, "val": 1, "test": 1}
    assert info.source["not_in_karpathy_split"] == 1 and info.source["images_with_extra_captions"] == 2
    assert "Left out 1 image(s) of the caption file(s)" in capsys.readouterr().out
    records = split_records(tmp_path / "out", "train")
    assert [r["image/key"].decode() for r in records] == [
        "COCO_train2014_000000000001.jpg", "COCO_val2014_000000000002.jpg", "COCO_train2014_000000000003.jpg",
        "COCO_val2014_000000000006.jpg"]
    assert [int(r["image/id"]) for r in records] == [0, 1, 2, 5]  # Karpathy order, as --dataset=karpathy gives
    seven = [c.decode() for c in records[1]["captions"]]
    assert seven == [f"a photo 2 with id {1100 + 7 * k}" for k in range(5)]  # smallest annotation ids first
    assert tf.io.decode_png(records[1]["image/encoded"]).numpy().shape == (6, 8, 3)
    assert schema.CIDER_KEYS in records[0]


def test_coco_bad_input_is_named(tmp_path):
    paths, karpathy, images = _coco(tmp_path, [5, 4, 5], ["train", "train", "val"])
    with pytest.raises(KitmDataError, match=r"image COCO_val2014_000000000002.jpg has 4 captions; kitm needs 5"):
        build_coco_captions(tmp_path / "out", paths, karpathy, images, relevance=(), progress=False)
    info = build_coco_captions(tmp_path / "out", paths, karpathy, None, few_captions="skip", relevance=(),
                               progress=False)
    assert info.image_mode == "none" and info.num_images("train") == 1
    assert info.source["images_with_too_few_captions"] == 1

    content = json.loads(paths[0].read_text())
    content["annotations"][3]["caption"] = ""
    paths[0].write_text(json.dumps(content))
    with pytest.raises(KitmDataError, match=r"image COCO_train2014_000000000001.jpg, caption \d \(annotation id "
                                            r"\d+\) is empty"):
        build_coco_captions(tmp_path / "out2", paths, karpathy, None, relevance=(), progress=False)
    del content["annotations"][3]["caption"]
    paths[0].write_text(json.dumps(content))
    with pytest.raises(KitmDataError, match=r"captions_train2014.json: annotation 3 lacks field 'caption'"):
        build_coco_captions(tmp_path / "out2", paths, karpathy, None, relevance=(), progress=False)
    assert main(["--dataset=coco_captions", f"--out={tmp_path / 'out3'}", f"--karpathy_json={karpathy}"]) == 2

