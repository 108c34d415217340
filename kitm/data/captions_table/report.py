"""The build's summary of a caption table's rules, printed from the report `load_table_entries` returns."""

from __future__ import annotations

from typing import Any

SMALL_SPLIT = 100  # kitm.eval.small_sets.SMALL_SET_IMAGES: fewer images than this give figures that vary by several points


def print_report(report: dict[str, Any]) -> None:
    """The build's summary of the rules: what was read, chosen, cut, dropped, repeated and how it was split."""
    rule = report["caption_rule"]
    c = rule["captions_per_image"]
    separator = {None: "", "\t": ", tab-separated"}.get(report["csv_separator"],
                                                        f", separator {report['csv_separator']!r}")
    print(f"Read {report['rows']} row(s) of {report['captions']} ({report['format']}{separator}): "
          f"{report['images_in_table']} image(s); images by caption count {rule['images_by_caption_count']}.")
    if report["empty_captions_dropped"]:
        print(f"Dropped {report['empty_captions_dropped']} empty caption(s) (--empty_captions=skip).")
    if report["skipped_missing"]:
        print(f"Left out {report['skipped_missing']} image(s) missing on disk (--missing_images=skip).")
    if report.get("skipped_unreadable"):
        listed = report["unreadable_images"]
        print(f"Left out {report['skipped_unreadable']} image(s) that do not decode (--missing_images=skip): "
              + "; ".join(listed[:3]) + ("; ..." if report["skipped_unreadable"] > 3 else "")
              + (f" (the first {len(listed)} are listed in dataset.json's source.unreadable_images)."
                 if report["skipped_unreadable"] > 3 else "."))
    duplicates = report.get("duplicates") or {"rows": 0}
    if duplicates["rows"]:
        print(f"{duplicates['rows']} duplicated row(s): they repeat an earlier row's image and caption exactly "
              f"({duplicates['images']} image(s); {'; '.join(duplicates['examples'])}"
              f"{'; ...' if duplicates['rows'] > len(duplicates['examples']) else ''}). They count as captions "
              "below; if the copies are a mistake (a table concatenated twice), remove them from the table.")
    how = "the most common count (--captions_per_image=auto)" if rule["requested"] == "auto" else "--captions_per_image"
    print(f"Captions per image: {c}, {how}.")
    if rule["images_with_extra_captions"]:
        copies = rule.get("images_with_extra_captions_only_by_duplicates", 0)
        print(f"{rule['images_with_extra_captions']} image(s) have more than {c}: they keep their first {c} "
              f"({rule['extra_captions_dropped']} caption(s) dropped)"
              + (f"; {copies} of them only through duplicated rows." if copies else "."))
    if rule["images_left_out_with_fewer_captions"]:
        print(f"Left out {rule['images_left_out_with_fewer_captions']} image(s) with fewer than {c} caption(s) "
              f"(--few_captions={rule['few_captions']}).")
    if rule["images_with_repeated_captions"]:
        print(f"{rule['images_with_repeated_captions']} image(s) have fewer than {c} caption(s): filled by repeating "
              f"them ({rule['repeated_captions']} repeated caption(s), --few_captions=repeat); repeated captions "
              "inflate caption-to-image R@K a little.")
    split = report["split"]
    how = (f"from column {split['column']!r}" if split["rule"] == "column"
           else f"random by image, --split_seed={split['seed']}")
    print(f"Splits ({how}): " + ", ".join(f"{name} {count}" for name, count in split["images"].items()) + ".")
    small = {name: count for name, count in split["images"].items() if name != "train" and 0 < count < SMALL_SPLIT}
    if small:
        print("Note: " + " and ".join(f"the {name} split has {count} image(s)" for name, count in small.items())
              + f": figures over so few vary by several points between splits, and NCS@K measures nothing where K "
              f"reaches every image a caption query ranks (kitm.eval warns); for figures to compare, give "
              f"--val_images / --test_images of {SMALL_SPLIT} or more.")
    leaks = report.get("identical_across_splits") or {"groups": 0}
    if leaks["groups"]:
        shown = "; ".join(" = ".join(group["images"]) + f" [sha256 {group['sha256'][:12]}]"
                          for group in leaks["examples"][:3])
        more = "; ..." if leaks["groups"] > 3 else ""
        print(f"Warning: identical images across splits (test leakage): {leaks['images']['val']} val and "
              f"{leaks['images']['test']} test image(s) have byte-identical copies in another split, "
              f"{leaks['groups']} group(s) of identical files ({shown}{more}); R@K rewards recalling a copy. Remove "
              "the copies from the table, or put each group in one split (--split_column). The groups (the first 100): "
              "dataset.json's source.identical_across_splits.")
