"""Your own data: a table of image paths and captions (open_clip's CSV, or JSON Lines) + images -> TFRecords.

The two formats people bring from open_clip and sentence-transformers:

* **CSV**: a header row, then one row per (image, caption) pair. Columns are named by `image_column` and
  `caption_column`; the defaults are open_clip's (`--csv-img-key filepath`, `--csv-caption-key title`).
  open_clip reads its "csv" files with a tab separator by default (`--csv-separator "\\t"`), spreadsheets and
  pandas write commas: `csv_separator="auto"` takes a tab when the header line holds one, else a comma; give
  ``","``, ``"\\t"`` (or ``"tab"``), ``";"``... to fix it. Quoting follows the `csv` module's default dialect
  (double quotes, as pandas), so captions may hold separators, quotes and line breaks.
* **JSON Lines**: one JSON object per line with the same keys (blank lines are skipped).

The format follows the file name (.csv, .tsv -> CSV; .jsonl, .ndjson -> JSON Lines) unless `captions_format` says.
The file is read once, streaming, as UTF-8 (a byte-order mark is allowed); its SHA-256 goes into the build's
parameters, so a resumed build on an edited table stops instead of mixing two tables.

Rules, each printed in the build's summary and stored under `source` in dataset.json:

* **images**: rows are grouped by image path (any number of rows per image, in any order); an image's captions
  keep the file's order, image ids follow the order of first appearance. A path is absolute, or relative to
  `images` (the image folder), or, without `images`, to the table's own folder, so that a table kept beside its
  images builds from any working directory (open_clip opens paths relative to where it runs: give
  ``--images=<that folder>``). An image file that is absent stops the build naming the row, or
  (``missing_images="skip"``) is left out and counted; every image is decoded once before anything is written,
  and one that does not decode (a JPEG cut short), or is in a format TensorFlow does not decode (TIFF, HEIC...),
  stops the build naming the row, or (``missing_images="skip"``) is left out and listed. Images whose bytes are
  identical (SHA-256) but that sit in different splits are reported as test leakage, with counts and names.
* **captions per image** C (the records hold exactly C per image): ``captions_per_image="auto"`` takes the count
  that the most images have exactly (ties: the smaller count), which changes the fewest images: COCO's five with a
  few sixes and sevens gives 5, a one-caption-per-image web table gives 1. An image with more than C keeps its first
  C in file order (the rest are counted as dropped captions). An image with fewer than C: ``few_captions="skip"``
  (the default here) leaves it out and counts it; ``"repeat"`` fills it up by repeating its captions cyclically
  (a, b -> a, b, a, b, a), counted as images with repeated captions, because a repeated caption is a second copy of
  the same query and inflates caption-to-image R@K a little; ``"stop"`` stops naming the image's first row.
  Empty captions stop the build naming the row (``empty_captions="skip"``: dropped and counted before the rule).
  Rows that repeat an earlier row's image and caption exactly are reported as duplicates (a count and the first
  lines, "line 12 repeats line 2"), not only as images with extra captions; they are kept as captions.
* **splits**: with `split_column`, each row's value must be train, val or test and all rows of an image agree.
  Without it, a seeded random split by image (`split_seed`) draws `val_images` and `test_images` images: a count
  (``500``), a fraction (``0.1``), or ``"auto"`` (5% of the images, at least 2 and at most 1,000: the size of the
  Flickr and COCO 1K test sets, beyond which evaluation's image-by-caption matrix only grows), or 0 for none. The
  draw depends only on the images left after the rules above and the seed. Each split keeps the table's order.
  The training split must keep at least 2 images.

Nothing here does per-pair work; the parse loop is per row and groups with a dict.
"""

from kitm.data.captions_table.entries import load_table_entries
from kitm.data.captions_table.grouping import (FEW_CAPTION_POLICIES, TableImage, apply_caption_rule,
                                               auto_captions_per_image, duplicate_report, group_rows)
from kitm.data.captions_table.reading import FORMATS, TableRow, read_table, separator_of, table_format
from kitm.data.captions_table.report import print_report
from kitm.data.captions_table.splits import (AUTO_SPLIT_FRACTION, AUTO_SPLIT_MAX, AUTO_SPLIT_MIN, MIN_TRAIN_IMAGES,
                                             SPLIT_VALUES, random_split, split_sizes)
from kitm.data.captions_table.writing import DECODABLE_FORMATS, build_captions_table, read_table_image

__all__ = ["FORMATS", "FEW_CAPTION_POLICIES", "TableRow", "TableImage", "read_table", "group_rows",
           "auto_captions_per_image", "apply_caption_rule", "split_sizes", "random_split", "load_table_entries",
           "build_captions_table"]
