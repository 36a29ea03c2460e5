"""S3's answers that mean "no object at this key", for a role that cannot list.

The platform's roles may read the objects of their buckets (``s3:GetObject`` on
``bucket/*``) but not list the buckets (no ``s3:ListBucket``). S3 hides from such a
role whether a key exists: a GET or HEAD of a missing key is answered 403
AccessDenied, not 404 NoSuchKey. Three reads expect a key to be missing at times (a
job's ``input_uri`` that names no file, a dropped file deleted while it is split, a
claim-checked payload past its bucket's expiry), so they read either answer as
"missing".

Why not grant ``s3:ListBucket`` instead, so that S3 answers 404: listing the drop
bucket would let the router, the requests function and the splitter enumerate every
tenant's file names, which no code path needs; and a 403 here cannot mean anything
else: these roles hold ``s3:GetObject`` on every key of the bucket, the buckets are
encrypted with S3-managed keys (no KMS grant to miss), and no bucket policy denies
a read. A role that lost its ``s3:GetObject`` would see every read fail, which the
tests of each tier catch (an existing file's job, a payload read back).
``docs/deploying.md`` says the same for operators.
"""

from __future__ import annotations

from typing import Any

# 404 NoSuchKey (GET) and 404 (HEAD: no body, so botocore names the status) where
# the role may list the bucket or no IAM stands between (the emulator with IAM
# off); 403 AccessDenied (GET) and 403 (HEAD) where it may not.
MISSING_KEY_CODES = frozenset({"NoSuchKey", "404", "NotFound", "AccessDenied", "403"})


def error_code(exc: Exception) -> str:
    """The S3 error code of a botocore ``ClientError`` ("" for anything else)."""
    response: Any = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", ""))


def object_missing(exc: Exception) -> bool:
    """Whether ``exc``, from a GET or HEAD of one object, says there is no object at
    the key, as S3 answers a role with or without ``s3:ListBucket``."""
    return error_code(exc) in MISSING_KEY_CODES
