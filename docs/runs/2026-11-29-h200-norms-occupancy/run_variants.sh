#!/bin/bash
# Times each case of scratch_dev/v/list.txt (make_variants.sh) against its variants; output under $OUT/t.
set -u
export PYTHONUNBUFFERED=1
mkdir -p $OUT/t
while read c d sh t case; do
  a=(); for f in scratch_dev/v/$case/lb*.cu; do [ -f $f ] && a+=(--variant $f); done
  timeout 40 build/epifuse bench scratch_dev/v/${c}_$d.json --shape $sh --tile $t --no-sweep --no-unfused --repeats 20 --json "${a[@]}" > $OUT/t/$case.json 2>$OUT/t/$case.err
  python3 -c "
import json; r=json.load(open('$OUT/t/$case.json'))['results'][0]
print('%-42s gen %.1f%%' % ('$case', 100*r['fused']['of_copy']), ' '.join('%s %.1f%%%s' % (k.split('/')[-1][:-3], 100*v.get('of_copy',0), '' if v.get('ok') else '(BAD)') for k,v in r['variants'].items()))" | tee -a $OUT/t/all.txt
done < scratch_dev/v/list.txt
cd $OUT && tar czf r.tgz t && rm -rf t
