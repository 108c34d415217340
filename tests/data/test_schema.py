"""kitm.data.schema: a file given where a dataset folder is expected is named for what it is, with the command that
builds a dataset from it."""

import pytest

import kitm  # noqa: F401
from kitm.data import schema
from kitm.errors import KitmConfigError, KitmDataError


def test_a_caption_table_given_as_the_dataset_gets_the_build_command(tmp_path):
    """--data_dir=<the CSV> said ".../dataset.json is missing" and suggested --out=<the CSV>, which then failed."""
    table = tmp_path / "my_photos.csv"
    table.write_text("filepath,title\na.png,a caption\n")
    with pytest.raises(KitmDataError) as error:
        schema.load_info(table)
    assert str(error.value) == (
        f"{table} is a caption table, not a dataset folder: kitm reads the folder that python -m kitm.data.build "
        "writes (dataset.json and its shards). Build it first:\n  python -m kitm.data.build --dataset=captions_table "
        f"--captions={table} --out=tfrecords/my_photos  (add --images=<folder> when its image paths are relative to "
        "another folder than the table's)\nthen give tfrecords/my_photos as the dataset folder.")
    (tmp_path / "dataset_flickr8k.json").write_text("{}")
    assert ("--dataset=karpathy --karpathy_json=" in schema.file_given_as_dataset(tmp_path / "dataset_flickr8k.json"))
    (tmp_path / "dataset.json").write_text("{}")
    assert schema.file_given_as_dataset(tmp_path / "dataset.json") == (
        f"{tmp_path / 'dataset.json'} is a dataset's dataset.json, not its folder: give the folder that holds it, "
        f"{tmp_path}.")
    assert schema.file_given_as_dataset(tmp_path) is None

    # Through the launcher's configuration, naming the setting.
    from kitm.experiment import experiment_config
    from kitm.experiment.datasets import ensure_dataset

    for dataset in ("my_photos", "synthetic"):  # the synthetic world is not built into the table either
        with pytest.raises(KitmConfigError) as error:
            ensure_dataset(experiment_config(dataset, data_dir=str(table)))
        message = error.value.for_flags()
        assert message.startswith(f"--data_dir={table}: {table} is a caption table, not a dataset folder")
        assert f"--dataset=captions_table --captions={table} --out=tfrecords/my_photos" in message
    assert table.read_text() == "filepath,title\na.png,a caption\n"
