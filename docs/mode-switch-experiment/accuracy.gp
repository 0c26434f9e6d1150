set terminal pngcairo size 1000,600 noenhanced
set output 'docs/mode-switch-experiment/accuracy.png'
set datafile separator ','
set key bottom right
set grid
set title 'Test accuracy against training time: cnn, 2 replicas, batch 64 per replica'
set xlabel 'training time, s (evaluations excluded)'
set ylabel 'test accuracy'
set yrange [0.75:*]
plot 'docs/mode-switch-experiment/sync.csv' skip 1 using 4:10 with linespoints title 'sync', 'docs/mode-switch-experiment/async.csv' skip 1 using 4:10 with linespoints title 'async', 'docs/mode-switch-experiment/ssp2.csv' skip 1 using 4:10 with linespoints title 'ssp:2', 'docs/mode-switch-experiment/sync_async_sync.csv' skip 1 using 4:10 with linespoints title 'sync->async->sync', 0.85 with lines dashtype 2 linecolor 'gray' title '0.85'
