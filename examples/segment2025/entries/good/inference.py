"""segment2025's good sample entry: the lesion is where PET uptake is over 40 % of the case's
maximum (a classic baseline for head and neck tumours). Reads /input/RECORD.pt.mha and writes the
mask to /output/RECORD.mha (uint8, 1 in the lesion), RECORD being $VMJUDGE_RECORD. Standard
library only, as the image holds Debian's python3 and nothing else."""

import os
import struct
import sys

INPUT = os.environ.get("SEGMENT_INPUT", "/input")
OUTPUT = os.environ.get("SEGMENT_OUTPUT", "/output")
TYPES = {"MET_SHORT": "h", "MET_USHORT": "H", "MET_UCHAR": "B", "MET_FLOAT": "f"}


def read_mha(path):
    with open(path, "rb") as f:
        data = f.read()
    header, at = {}, 0
    while "ElementDataFile" not in header:
        end = data.index(b"\n", at)
        key, _, value = data[at:end].decode().partition("=")
        header[key.strip()] = value.strip()
        at = end + 1
    shape = [int(n) for n in header["DimSize"].split()]
    code = TYPES[header["ElementType"]]
    count = len(data[at:]) // struct.calcsize(code)
    return header, shape, struct.unpack(f"<{count}{code}", data[at:])


def write_mha(path, header, shape, mask):
    text = (f"ObjectType = Image\nNDims = {len(shape)}\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
            f"CompressedData = False\nElementSpacing = {header.get('ElementSpacing', '1 1 1')}\n"
            f"DimSize = {' '.join(map(str, shape))}\nElementType = MET_UCHAR\nElementDataFile = LOCAL\n")
    with open(path, "wb") as f:
        f.write(text.encode() + bytes(mask))


def main():
    record = os.environ["VMJUDGE_RECORD"]
    header, shape, pet = read_mha(os.path.join(INPUT, f"{record}.pt.mha"))
    level = 0.4 * max(pet)
    write_mha(os.path.join(OUTPUT, f"{record}.mha"), header, shape, [1 if v > level else 0 for v in pet])
    print(f"{record}: {sum(1 for v in pet if v > level)} voxels over {level:.0f}", file=sys.stderr)


main()
