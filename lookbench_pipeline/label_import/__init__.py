"""Labels from other data sets' own annotation files and from a shop's own attribute facets, on our taxonomy; and
the precedence that merges every source of an item's labels into one row of ``schemas.ANNOTATIONS``.

Annotation files (a drop's ``annotations:``, :class:`~lookbench_pipeline.config.AnnotationFileConfig`):

* ``vitonhd``: VITON-HD garment tags as IDM-VTON publishes them (``vitonhd_test_tagged.json``: per ``file_name`` a
  ``category_name`` and ``tag_info`` — item, colors, prints, textures, sleeveLength, neckLine, fit, length,
  details, shape, looks — and the garment's box on the ``cloth`` and the ``image`` (person) photo);
* ``fashionpedia``: a COCO-style Fashionpedia file (categories, attribute ids per garment, polygons or RLE); its
  attribute ids are joined by name to the ontology file (``categories:``,
  ``fashionpedia_category_attributes_descriptions.json``) whose ids the taxonomy's ``fashionpedia:`` mapping
  uses, so the sample file's own numbering (320 attributes) and the final one (294) both map. Garment parts
  (sleeve, neckline, collar, pocket...) give their attributes to the garment whose box holds them;
* ``deepfashion2``: DeepFashion2 in COCO form (the ``deepfashion2_to_coco`` conversion, e.g. mmpose's);
* ``modanet``: ModaNet's snaps file (``[{image_id, items: [...]}]``) or its COCO release, categories by id from
  ``categories.tsv`` (``categories:``).

How a source label becomes a taxonomy value, and what each data set's categories and tags are:
``lookbench_pipeline/data/label_sources.yaml`` (:class:`LabelMapper`). Nothing is guessed: a value the taxonomy
does not have, or that the garment's category does not allow, is kept in the label's ``unmapped`` list with the
reason (``no_taxonomy_value``, ``not_allowed_for_category``, ``conflicting_values``, ``unknown_tag``, ``no_box``...);
an entry whose category does not map is counted unmapped with its reason (``unknown_category``,
``ambiguous_category``, ``not_in_taxonomy``, ``unknown_image``, ``part_without_garment``), and so is one whose box
lies wholly outside its image (``box_outside_image``: it never labels the photo).

An entry describes a photo of the drop when one of the source's ``image_name`` templates (``str.format`` with
``{file_name}``, ``{stem}``, ``{image_id}``; relative to the drop folder) names a file of the drop. Per source:
``entries = mapped + unmapped + no_photo``. Boxes are ``[x1, y1, x2, y2]`` in the pixels of the photo as the data
set annotated it, clipped to the image where the file gives its size. A malformed file is a ConfigError naming the
file and the entry (an id that is no number or string, a COCO image id given to two files...); a UTF-8 byte-order
mark is allowed. A photo described by several garments (a street photo) is labelled with its largest garment
(box area), every mapped garment kept in the ``garments`` column with its box.

Precedence (docs/ANNOTATION.md): imported labels (``import:<kind>``) > the shop's facets (``facets:schema.org``,
``facets:items-sheet``) > an image model (``vlm:…``) > the catalogue text (``catalog-text/1``). The category comes
from the first source that gives one; each attribute from the first source whose category is that category;
every differing value of a later source is recorded in ``conflicts``. The catalogue text never fills an image
model's label (its "not visible" is an answer, and the judge checked only its labels).

Modules, each importing only those above it: :mod:`.mapper` (the bottom: source labels onto the taxonomy, the rank
of a source), :mod:`.readers` (the annotation files), :mod:`.photos` (a drop's photos and their imported labels),
:mod:`.precedence` (facets as a source, the merge). This package re-exports their public names:
``from lookbench_pipeline.label_import import X`` keeps working.
"""

# template_fields validates a config field, so it lives in config (config must not import this package)
from ..config import TEMPLATE_FIELDS, template_fields
from .mapper import KINDS, LABEL_SOURCES, LabelMapper, annotator_of, rank
from .photos import DropImport, check_drop, import_drop, photo_label, photo_names
from .precedence import FACETS_ITEMS_SHEET, FACETS_SCHEMA_ORG, Candidate, apply, candidates, facet_candidate, resolve
from .readers import (PART_SUPERCATEGORIES, AnnotationFile, Garment, read_annotation_file, read_deepfashion2,
                      read_fashionpedia, read_modanet, read_modanet_categories, read_vitonhd)

__all__ = [
    "FACETS_ITEMS_SHEET", "FACETS_SCHEMA_ORG", "KINDS", "LABEL_SOURCES", "PART_SUPERCATEGORIES", "TEMPLATE_FIELDS",
    "AnnotationFile", "Candidate", "DropImport", "Garment", "LabelMapper", "annotator_of", "apply", "candidates",
    "check_drop", "facet_candidate", "import_drop", "photo_label", "photo_names", "rank", "read_annotation_file",
    "read_deepfashion2", "read_fashionpedia", "read_modanet", "read_modanet_categories", "read_vitonhd", "resolve",
    "template_fields",
]
